"""The grammar of a fake GPU inventory (``danlu up --fake-gpus``, ``DANLU_FAKE_GPUS``): one
reader, so that the settings check what the server builds (:func:`parse_fake_gpus`, read by
:mod:`danlu.config` and by :func:`danlu.devices.inventory.fake_inventory`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from danlu.core.cluster import GPU_TYPES, GpuType, gpu_type, gpu_type_from_device
from danlu.core.errors import ConfigError, SpecError, UnknownNameError
from danlu.core.units import format_bytes, parse_bytes

MAX_FAKE_GPUS_PER_NODE = 1024
"""The most GPUs a fake node may have (a typo such as ``1000000x80GiB`` would otherwise hang
the start-up building a million GPUs)."""
MAX_FAKE_GPUS = 100_000
"""The most fake GPUs in all (a scheduling round over them stays well under a second)."""


@dataclass(frozen=True, slots=True)
class FakeGroup:
    """One group of a fake inventory, one node: ``count`` GPUs of ``gpu_type`` (whose
    ``memory`` is each GPU's)."""

    count: int
    gpu_type: GpuType


_FLAG = "--fake-gpus"
_GROUP = re.compile(
    r"^\s*([0-9]+)\s*[xX]\s*([0-9][0-9.]*\s+[A-Za-z]+|[^:\s]+)\s*(?::\s*(\S+))?\s*$"
)
"""``COUNTxSIZE[:TYPE]``; a SIZE may have blanks between its number and its unit
(``80 GiB``), as a size in a job spec may (:func:`~danlu.core.units.parse_bytes`)."""


_LEAST_FAKE_MEMORY = 1 << 30
"""The smallest fake GPU (1 GiB): anything less is a size written without its unit."""


def _known_type(name: str) -> GpuType | None:
    """The GPU type ``name`` names (a type or an alias such as ``4090``), or None."""
    try:
        return gpu_type(name)
    except UnknownNameError:
        return None


def _sized_type(spec: str, group: str, type_name: str, memory: int) -> GpuType:
    """The type ``COUNTxSIZE:TYPE`` names: a family name without a size (``A100``,
    ``V100``) is resolved by ``memory`` as a device's name is
    (:func:`~danlu.core.cluster.gpu_type_from_device`: 40 GiB is an A100-40GB); a variant
    named with its size (``A100-80GB``, ``v100m16``) that ``memory`` contradicts is refused."""
    named = gpu_type(type_name)
    by_memory = gpu_type_from_device(named.name, memory)
    if by_memory.name == named.name or by_memory.name not in GPU_TYPES:
        return named
    # what follows the model number ("A100", "v100") names a size: "-80GB", "m16", "-40"
    if re.search(r"\d", re.sub(r"^[A-Za-z]*\d+", "", type_name.strip())):
        raise _fake_error(
            spec,
            f"{group!r}: a {format_bytes(memory)} GPU is of type {by_memory.name}, not "
            f"{named.name}; write {group.partition(':')[0]}:{by_memory.name}",
        )
    return GPU_TYPES[by_memory.name]


def _fake_error(spec: str, why: str, *, types_listed: bool = False) -> ConfigError:
    """The error of a bad ``spec``: ``why``, then the grammar and the GPU types (unless
    ``why`` lists them already: ``types_listed``)."""
    types = "" if types_listed else f" (types: {', '.join(GPU_TYPES)})"
    return ConfigError(
        f"{_FLAG} {spec!r}: {why}; write COUNTxSIZE or COUNTxTYPE, comma-separated, optionally "
        f"COUNTxSIZE:TYPE, e.g. {_FLAG} 4x80GiB or {_FLAG} 2xH100,4x40GiB:A100-40GB{types}"
    )


def parse_fake_gpus(spec: str) -> tuple[FakeGroup, ...]:
    """The groups of ``NxSIZE[,NxSIZE...]``, where SIZE is a byte size with its unit
    (``80GiB``, at least 1 GiB) or a GPU type (``H100``; a type name or alias is read as the
    type even when it is a number, as ``4090``), optionally ``NxSIZE:TYPE`` (a type with size
    variants named without its size is resolved by SIZE: ``4x40GiB:A100`` is four
    A100-40GB; a variant SIZE contradicts, as ``40GiB:A100-80GB``, is refused). At most
    :data:`MAX_FAKE_GPUS_PER_NODE` GPUs a group and :data:`MAX_FAKE_GPUS` in all, counted
    before any is built. Raises :class:`ConfigError` naming the flag."""
    groups = [g for g in spec.split(",")] if spec.strip() else []
    if not groups:
        raise _fake_error(spec, "no GPUs given")
    parsed: list[FakeGroup] = []
    total = 0
    for group in groups:
        _check_digits(spec, group)
        match = _GROUP.match(group)
        if match is None:
            raise _fake_error(spec, f"{group.strip()!r} is not COUNTxSIZE")
        digits = match.group(1).lstrip("0")
        count = int(digits or 0) if len(digits) <= 9 else MAX_FAKE_GPUS + 1  # no int() of 5000
        size, type_name = match.group(2), match.group(3)
        if count <= 0:
            raise _fake_error(spec, f"{group.strip()!r} has no GPUs")
        total += count
        if count > MAX_FAKE_GPUS_PER_NODE or total > MAX_FAKE_GPUS:
            raise _fake_error(
                spec,
                f"at most {MAX_FAKE_GPUS_PER_NODE} GPUs a node and {MAX_FAKE_GPUS:,} in all "
                "(a fake inventory is for trying danlu out)",
            )
        parsed.append(FakeGroup(count, _group_type(spec, group, count, size, type_name)))
    return tuple(parsed)


def _check_digits(spec: str, group: str) -> None:
    """Refuse a group written with digits other than ASCII's (``٣x80GiB``, ``²xH100``,
    ``１２x80GiB``): ``\\d`` and ``int()`` read them as numbers, and the GPUs the server
    built were not the ones written."""
    odd = next((c for c in group if c.isdigit() and not c.isascii()), None)
    if odd is not None:
        raise _fake_error(
            spec,
            f"{group.strip()!r} has {odd!r} (U+{ord(odd):04X}), which is not an ASCII digit; "
            "use the digits 0-9 for counts and sizes",
        )


def _group_type(spec: str, group: str, count: int, size: str, type_name: str | None) -> GpuType:
    """The type (with each GPU's memory) of one group ``COUNTxSIZE[:TYPE]``."""
    known = _known_type(size)
    try:
        if known is not None:
            if type_name:
                raise _fake_error(spec, f"{group.strip()!r} names a type twice")
            kind = known
            memory = kind.memory
        elif size[0].isdigit():
            if size.isdigit():
                raise _fake_error(
                    spec,
                    f"{group.strip()!r}: {size} bytes? give the size a unit (e.g. "
                    f"{count}x{size}GiB) or name a GPU type",
                )
            memory = parse_bytes(size, _FLAG)
            if memory < _LEAST_FAKE_MEMORY:
                raise _fake_error(
                    spec,
                    f"{group.strip()!r}: a GPU of {format_bytes(memory)} is too small "
                    f"(at least {format_bytes(_LEAST_FAKE_MEMORY)}); is the unit right?",
                )
            kind = (
                _sized_type(spec, group.strip(), type_name, memory)
                if type_name
                else GpuType("generic", memory)
            )
        else:
            kind = gpu_type(size)
            memory = kind.memory
    except (SpecError, UnknownNameError) as exc:
        listed = isinstance(exc, UnknownNameError)  # its message lists the valid names
        raise _fake_error(spec, str(exc), types_listed=listed) from None
    if memory <= 0:
        raise _fake_error(spec, f"{group.strip()!r} has no memory")
    return GpuType(kind.name, memory)
