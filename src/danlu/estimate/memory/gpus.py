"""GPU types and the per-GPU constants of the memory model, in one place.

``capacity_bytes`` is the memory the device reports (``torch.cuda.get_device_properties
(0).total_memory`` is slightly less than the marketing size). ``context_bytes`` is what the CUDA
context, the CUDA runtime and PyTorch's kernels take outside the caching allocator once the
first kernels have run with lazy module loading (CUDA >= 11.7); typical values from public
measurements (nvidia-smi minus ``torch.cuda.memory_reserved``), not measured by us except where
the entry says so: recalibrate with ``benchmarks/memory_accuracy.py --calibrate out.json`` on
the real GPU and pass the file with ``--gpu-table``. ``cublas_workspace_bytes`` is PyTorch's
default cuBLAS workspace per (handle, stream): 32 MiB on Hopper (sm90), 4096 KiB x 2 + 16 KiB x
8 before it; training holds ``cublas_handles`` of them (the forward thread and the autograd
device thread). ``conv_workspace_ratio`` sizes cuDNN workspaces as a fraction of the
convolution's output bytes (0 until calibrated).

A GPU the table lacks (a new entry of a ``--gpu-table`` file, or a node's GPU type the server
only knows by name and memory: :func:`gpu_for_memory`) gets the cuBLAS workspace of its
``compute_capability`` (32 MiB from sm90 on) and, unless the file gives ``context_bytes``,
:func:`typical_context_bytes` for that capability: the table's public value for the same
capability (``8.0``: 430 MiB, ``8.6``/``8.9``: 300 MiB, ``7.0``: 310 MiB, ``7.5``: 270 MiB), for
sm90 and newer the 750.8 MiB measured on the H200 and the H100, otherwise the largest of its
major version; with no (or an unrecognised) capability :data:`UNKNOWN_CONTEXT_BYTES` (768 MiB)
and the 32 MiB workspace: the larger figures, so an unknown GPU is never planned fuller than a
known one.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path

from danlu.core.cluster import gpu_type_from_device
from danlu.core.errors import ConfigError, UnknownNameError
from danlu.core.units import MAX_BYTES
from danlu.core.values import quoted, range_message
from danlu.estimate.checks import check_finite

MiB = 1024**2
GiB = 1024**3
_CUBLAS_HOPPER = 4096 * 8 * 1024
_CUBLAS_PRE_HOPPER = 4096 * 1024 * 2 + 16 * 1024 * 8


@dataclass(frozen=True)
class GpuSpec:
    """Memory-model constants of one GPU type."""

    name: str
    capacity_bytes: int
    context_bytes: int
    cublas_workspace_bytes: int
    cublas_handles: int = 2
    conv_workspace_ratio: float = 0.0
    compute_capability: str = ""

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return asdict(self)


def _major(cc: str) -> int | None:
    """The major version of a compute capability such as ``"9.0"`` (None: not one, such as
    ``"².0"``, which ``str.isdigit`` takes and ``int()`` refuses, or thousands of digits:
    both were a bare ValueError from a ``--gpu-table`` file)."""
    head = cc.strip().partition(".")[0]
    if not head.isdigit() or len(head) > _MAX_MAJOR_DIGITS:
        return None
    try:
        return int(head)
    except ValueError:
        return None


_MAX_MAJOR_DIGITS = 4
"""More digits than any compute capability's major version has."""


def cublas_workspace_for(compute_capability: str) -> int:
    """PyTorch's default cuBLAS workspace per (handle, stream) on a GPU of this compute
    capability: 32 MiB from Hopper (sm90) on, 4096 KiB x 2 + 16 KiB x 8 before it; the
    larger for an empty or unrecognised capability."""
    major = _major(compute_capability)
    return _CUBLAS_PRE_HOPPER if major is not None and major < 9 else _CUBLAS_HOPPER


def _g(name: str, cap_gib: float, ctx_mib: float, cc: str) -> GpuSpec:
    ws = cublas_workspace_for(cc)
    return GpuSpec(name, int(cap_gib * GiB), int(ctx_mib * MiB), ws, compute_capability=cc)


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        # H100 80GB HBM3 (SXM/PCIe); context measured on an H100 80GB HBM3 (memory_accuracy.py
        # --calibrate, 2026-12-05: torch 2.11.0+cu130, driver 580.159.04, median of 6 runs),
        # the same 750.8125 MiB as the H200's; capacity is total_memory's public value
        _g("h100", 79.19, 750.8125, "9.0"),
        # H100 NVL (94 GB HBM3): NVML's 95830 MiB less the ~470 MiB by which the H100 80GB's
        # total_memory is below its NVML total; context as the H100's. Not measured
        _g("h100-nvl", 93.12, 750.8125, "9.0"),
        # H200 141GB HBM3e; capacity and context measured (memory_accuracy.py --calibrate,
        # 2026-11-27: torch 2.11.0+cu130, driver 580.159.04, median of 6 runs)
        _g("h200", 139.80, 750.8125, "9.0"),
        _g("a100-80gb", 79.15, 430, "8.0"),
        _g("a100-40gb", 39.39, 430, "8.0"),
        _g("v100-32gb", 31.74, 310, "7.0"),
        _g("v100-16gb", 15.77, 310, "7.0"),
        _g("t4", 14.58, 270, "7.5"),
        _g("a10", 22.07, 300, "8.6"),
        _g("l4", 22.04, 300, "8.9"),
        _g("rtx4090", 23.53, 300, "8.9"),
    )
}
"""Built-in GPU table (capacity as reported by the device; context per the module docstring)."""

ALIASES = {
    "a100": "a100-80gb",
    "v100": "v100-32gb",
    "4090": "rtx4090",
    "rtx-4090": "rtx4090",
    "h100nvl": "h100-nvl",
}

_TYPICAL_CONTEXT_MIB: dict[str, float] = {
    "7.0": 310,
    "7.5": 270,
    "8.0": 430,
    "8.6": 300,
    "8.9": 300,
}
"""Public CUDA-context figures by compute capability (those of the table's entries)."""

HOPPER_CONTEXT_BYTES = int(750.8125 * MiB)
"""The context of sm90 and newer GPUs the table lacks: the value measured on both the H200 and
the H100 80GB (torch 2.11.0+cu130, driver 580.159.04; the public figure was 520 MiB)."""

UNKNOWN_CONTEXT_BYTES = 768 * MiB
"""The context of a GPU whose compute capability is not known: above every figure in the
table, so that such a GPU is not planned fuller than a known one."""


def typical_context_bytes(compute_capability: str) -> int:
    """A typical CUDA context for a GPU of ``compute_capability`` that the table lacks (see
    the module docstring): the default ``context_bytes`` of a new ``--gpu-table`` entry."""
    cc = compute_capability.strip()
    major = _major(cc)
    if major is None:
        return UNKNOWN_CONTEXT_BYTES
    if major >= 9:
        return HOPPER_CONTEXT_BYTES
    if cc in _TYPICAL_CONTEXT_MIB:
        return int(_TYPICAL_CONTEXT_MIB[cc] * MiB)
    same = [v for k, v in _TYPICAL_CONTEXT_MIB.items() if _major(k) == major]
    return int(max(same) * MiB) if same else UNKNOWN_CONTEXT_BYTES


def unknown_gpu(name: str, capacity_bytes: int, compute_capability: str = "") -> GpuSpec:
    """The spec of a GPU the table lacks, from its memory: context and cuBLAS workspace are
    the defaults for ``compute_capability`` (:func:`typical_context_bytes`,
    :func:`cublas_workspace_for`)."""
    return GpuSpec(
        gpu_key(name),
        capacity_bytes,
        typical_context_bytes(compute_capability),
        cublas_workspace_for(compute_capability),
        compute_capability=compute_capability,
    )


def load_gpu_table(path: str | Path | None = None) -> dict[str, GpuSpec]:
    """The built-in table, with entries of the JSON file ``path`` overriding or adding GPUs.

    The file maps GPU names to objects with any of :class:`GpuSpec`'s fields, e.g.
    ``{"h100": {"context_bytes": 547356672}}``. A new GPU needs ``capacity_bytes``; its
    ``cublas_workspace_bytes`` follows its ``compute_capability`` and its ``context_bytes``
    defaults to :func:`typical_context_bytes` of it (both unless given). An entry that changes
    a GPU's ``compute_capability`` alone gets that capability's cuBLAS workspace. The file is
    read as UTF-8, a byte-order mark at its start (as Windows editors write) skipped. Two
    entries of one GPU (as :func:`gpu_key` reads names: ``H100`` and ``h100``), or a field
    given twice in one entry, are a :class:`ConfigError` naming both (one was dropped).
    """
    table = dict(GPUS)
    if path is None:
        return table

    def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
        # json kept the last of two equal names: the first entry or field was dropped unread
        out: dict[str, object] = {}
        for name, value in pairs:
            if name in out:
                raise ConfigError(
                    f"--gpu-table: {path} gives {name!r} twice in one object; keep one"
                )
            out[name] = value
        return out

    try:  # a byte-order mark skipped
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"), object_pairs_hook=unique)
    except ConfigError:
        raise
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--gpu-table: cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"--gpu-table: {path} must hold a JSON object of GPU names")
    named: dict[str, str] = {}  # table key -> the file's name for it
    for name, fields in data.items():
        key = gpu_key(name)
        if key in named:  # "H100" and "h100", "a100" and "A100-80GB": the later one won
            raise ConfigError(
                f"--gpu-table: entries {named[key]!r} and {name!r} in {path} both name the GPU "
                f"{key!r} (names are read in any case, '_' as '-', aliases resolved); keep one"
            )
        named[key] = name
        if not isinstance(fields, dict):
            raise ConfigError(
                f"--gpu-table: entry {name!r} in {path} must be an object of GpuSpec fields, "
                f'e.g. {{"capacity_bytes": 85031714816}}, got {fields!r}'
            )
        changes = {k: v for k, v in fields.items() if k != "name"}
        for field_name, value in changes.items():
            problem = _field_problem(field_name, value)
            if problem:
                raise ConfigError(f"--gpu-table: entry {name!r} in {path}: {problem}")
        cc = changes.get("compute_capability")
        if key in table:
            base = table[key]
            if isinstance(cc, str) and "cublas_workspace_bytes" not in changes:
                changes["cublas_workspace_bytes"] = cublas_workspace_for(cc)
        else:
            base = unknown_gpu(key, 0, cc if isinstance(cc, str) else "")
        table[key] = replace(base, **changes)
        if table[key].capacity_bytes <= 0:
            raise ConfigError(
                f"--gpu-table: entry {name!r} in {path}: a new GPU needs capacity_bytes > 0"
            )
    return table


_FIELD_KINDS: dict[str, tuple[type, float]] = {
    "capacity_bytes": (int, 1),
    "context_bytes": (int, 0),
    "cublas_workspace_bytes": (int, 0),
    "cublas_handles": (int, 1),
    "conv_workspace_ratio": (float, 0),
}
_MAX_FIELD_INT = MAX_BYTES
"""The largest integer field of a ``--gpu-table`` entry (2**62, the largest size danlu
takes): a ``capacity_bytes`` of 10**400 was taken, and ``--max-batch``'s margin of it
(``5%``) raised a bare OverflowError."""


def _field_problem(name: str, value: object) -> str:
    """What is wrong with one field of a ``--gpu-table`` entry ('' when nothing)."""
    if name == "compute_capability":
        return "" if isinstance(value, str) else "compute_capability must be a string like '9.0'"
    if name not in _FIELD_KINDS:
        fields = ", ".join(f.name for f in dataclass_fields(GpuSpec) if f.name != "name")
        return f"unknown field {name!r}; the fields are {fields}"
    kind, low = _FIELD_KINDS[name]
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or (kind is int and not isinstance(value, int)):
        return f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}"
    if not (low <= value < math.inf):  # type: ignore[operator]
        return f"{name} must be >= {low:g} and finite, got {value!r}"
    if isinstance(value, int) and value > _MAX_FIELD_INT:  # (an int field: checked above)
        return f"{name} {range_message(low, _MAX_FIELD_INT, value)}"
    ratio = value if name == "conv_workspace_ratio" and isinstance(value, int | float) else 0
    if ratio > MAX_CONV_WORKSPACE_RATIO:
        return (
            f"conv_workspace_ratio must be at most {MAX_CONV_WORKSPACE_RATIO:g} (a workspace "
            f"that many times a convolution's output), got {value!r}"
        )
    return ""


MAX_CONV_WORKSPACE_RATIO = 1e6
"""The largest ``conv_workspace_ratio`` a ``--gpu-table`` entry takes (the largest cuDNN
workspace measured was about 50 times its convolution's output): ``1e308`` was taken, and the
replay of any traced convolution raised a bare OverflowError (an infinite workspace)."""


def gpu_key(name: str) -> str:
    """The table key of a GPU name, as both :func:`load_gpu_table` and :func:`get_gpu` read
    it: blanks around it dropped, lower case, ``_`` as ``-``, aliases resolved (``RTX_4090``
    -> ``rtx4090``). A ``--gpu-table`` entry ``"h100 "`` was a new GPU beside ``h100``: its
    calibration (with a ``capacity_bytes``) was kept under a name no look-up gave, and
    ``h100`` planned with the built-in figures."""
    key = name.strip().lower().replace("_", "-")
    return ALIASES.get(key, key)


def get_gpu(name: str, table: dict[str, GpuSpec] | None = None) -> GpuSpec:
    """Look a GPU type up by name (case-insensitive, ``_`` read as ``-``; ``a100`` means the
    80 GB one)."""
    table = table if table is not None else GPUS
    if not isinstance(name, str):  # None raised a bare AttributeError on .lower()
        raise UnknownNameError("GPU type (--gpu)", quoted(name), list(table))
    key = gpu_key(name)
    if key not in table:
        raise UnknownNameError("GPU type (--gpu)", name, list(table))
    return table[key]


def gpu_for_device(
    device_name: str, total_memory: int, table: dict[str, GpuSpec] | None = None
) -> GpuSpec:
    """The table's entry for the GPU a device reports (``torch.cuda.get_device_name(0)``
    and its ``total_memory``): ``"NVIDIA H200"`` -> ``h200``, ``"NVIDIA A100-SXM4-40GB"``
    -> ``a100-40gb``. :class:`UnknownNameError` (naming the table's GPUs) for a GPU the
    table does not have: add it with ``--gpu-table``. The capacity is never more than the
    ``total_memory`` the device reports (a smaller variant than the table's entry);
    :class:`SpecError` on ``total_memory`` unless it is a finite number >= 0."""
    check_finite("total_memory", total_memory, positive=False, what="a number of bytes")
    kind = gpu_type_from_device(device_name, total_memory)
    spec = get_gpu(kind.name, table)
    if 0 < total_memory < spec.capacity_bytes:
        spec = replace(spec, capacity_bytes=total_memory)
    return spec


def gpu_for_memory(name: str, memory: int, table: dict[str, GpuSpec] | None = None) -> GpuSpec:
    """The spec to plan a GPU with that the scheduler knows by its type ``name`` and
    ``memory`` in bytes (a node's :class:`~danlu.core.cluster.GpuType`): the table's entry
    with its capacity lowered to ``memory`` where that is less; for a name the table lacks,
    :func:`unknown_gpu` of ``memory`` (conservative context and workspace). Never a GPU
    with more memory than ``memory`` (when ``memory > 0``; 0 is memory not known: the table's
    entry, and :class:`UnknownNameError` for a name the table lacks). :class:`SpecError` on
    ``memory`` unless it is a finite number >= 0 (NaN made a GPU of NaN bytes)."""
    memory = int(check_finite("memory", memory, positive=False, what="a number of bytes"))
    try:
        spec = get_gpu(name, table)
    except UnknownNameError:
        if memory <= 0:
            raise
        return unknown_gpu(name, memory)
    if 0 < memory < spec.capacity_bytes:
        spec = replace(spec, capacity_bytes=memory)
    return spec
