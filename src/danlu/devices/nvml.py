"""GPU discovery through NVML (``nvidia-ml-py``, imported lazily as ``pynvml``).

Every function takes an optional ``nvml`` module object so tests can inject a fake one.

:func:`discover` honours ``CUDA_VISIBLE_DEVICES`` as CUDA reads it (NVML itself lists every
GPU of the machine: a node agent started with ``CUDA_VISIBLE_DEVICES=1,3`` offered all
eight): a comma-separated list of NVML indices (``1,3``; CUDA's order is NVML's with
``CUDA_DEVICE_ORDER=PCI_BUS_ID``) or GPU UUIDs (``GPU-8d1c...``, a unique prefix is
enough), read up to its first entry that is neither or that names no GPU: an index the
machine lacks, a UUID prefix no GPU has or two GPUs have (so ``-1``, like an empty value,
hides every GPU: discovery then fails, saying so). A GPU named twice makes CUDA show none:
discovery fails, saying so. Unset, every GPU is served. The GPUs served keep their NVML
indices: a job pinned to one gets that index in its own ``CUDA_VISIBLE_DEVICES``, which
replaces the agent's. MIG instances (``MIG-...``) are not GPUs discovery serves.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from danlu.core.cluster import GpuType, gpu_type_from_device
from danlu.devices.errors import DeviceUnavailableError, NvmlMissingError
from danlu.devices.inventory import GpuInfo, Inventory, NodeInventory

log = logging.getLogger(__name__)

_GiB = 1024**3
MAX_GPU_MEMORY = 1024**5
"""The most memory (bytes: 1 PiB) a GPU's report is believed for: a total above it, like
one of 0 or less, is NVML reporting nonsense, and the GPU is left out as unreadable."""
MIN_GPU_MEMORY = 256 * 1024**2
"""The least memory (bytes: 256 MiB) a GPU's report is believed for (the GPUs today's drivers
support have 1 GiB at least): a total below it is no byte count (a binding or shim reporting
MiB or KiB: an 80 GB GPU's 81920 or 83886080), and the GPU is left out as unreadable,
rather than served as a GPU on which no job asking for memory fits."""
MAX_GPUS_PER_NODE = 1024
"""The most GPUs one host's NVML count is believed for (the largest hosts have 16): a count
above it, or below 0, is NVML reporting nonsense, and discovery stops naming it rather than
reading (and warning about) millions of indices."""
MAX_PLAUSIBLE_WATTS = 5000.0
"""The most power one GPU is believed to draw (several times any accelerator's board
power): a power reading above it (NVML's unsigned ``0xFFFFFFFF`` mW, 4.3 MW), like an energy
counter rising faster than this between two readings, is a glitch, not use."""
MAX_PLAUSIBLE_CELSIUS = 300.0
"""The hottest a GPU's temperature reading is believed (far beyond any GPU's shutdown
temperature): one above it (NVML's unsigned ``0xFFFFFFFF``) is no reading."""
_FAKE_HINT = "or run without GPUs using fake ones: --fake-gpus 4x80GiB"
_NVML_HINT = f"install the NVIDIA driver and `pip install nvidia-ml-py`, {_FAKE_HINT}"


def load_nvml(nvml: ModuleType | Any | None = None) -> Any:
    """The NVML module (``pynvml``), initialised; :class:`DeviceUnavailableError` if absent."""
    lib: Any = nvml
    if lib is None:
        try:
            import pynvml  # optional: imported only when NVML is asked for

            lib = pynvml
        except ImportError:
            raise NvmlMissingError(f"NVML is not installed; {_NVML_HINT}") from None
    try:
        lib.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and friends: no driver, no device
        missing = _init_code(exc) == _LIBRARY_NOT_FOUND  # no driver's library to load
        error = NvmlMissingError if missing else DeviceUnavailableError
        raise error(f"NVML cannot start ({exc}); {_init_fix(exc)}") from None
    return lib


_INIT_FIXES: Mapping[int, str] = {
    4: "this user may not open the GPUs' device files (/dev/nvidia*): run danlu as a user "
    "allowed to (e.g. in the video group), or fix their permissions",
    9: "the NVIDIA kernel module is not loaded: load it (modprobe nvidia) or reinstall the driver",
    12: "NVML's library (libnvidia-ml.so.1) is not found: install the NVIDIA driver (in a "
    "container, start it with the host's GPUs: --gpus all)",
    18: "the NVIDIA kernel module and its library are of different driver versions (the "
    "driver was upgraded and the old module is still loaded): reboot the host, or stop "
    "what uses the GPUs and reload the nvidia kernel modules",
}
"""The fix of each ``nvmlInit`` error whose code (pynvml's ``NVMLError.value``) says why:
``NO_PERMISSION``, ``DRIVER_NOT_LOADED``, ``LIBRARY_NOT_FOUND`` and
``LIB_RM_VERSION_MISMATCH`` (installing the driver mends only the third); any other error
gets :data:`_NVML_HINT`."""
_VERSION_MISMATCH = 18
_LIBRARY_NOT_FOUND = 12


def _init_code(exc: BaseException) -> int | None:
    """The NVML error code of ``nvmlInit``'s error ``exc`` (pynvml's ``NVMLError.value``)."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _init_fix(exc: BaseException) -> str:
    """What to do about ``nvmlInit``'s error ``exc``: its code's fix (the text of a
    version mismatch names it also where the code is missing), else :data:`_NVML_HINT`."""
    code = _init_code(exc)
    if code is None and "version mismatch" in str(exc).lower():
        code = _VERSION_MISMATCH
    fix = _INIT_FIXES.get(code) if code is not None else None
    return _NVML_HINT if fix is None else f"{fix}; {_FAKE_HINT}"


def _text(value: str | bytes) -> str:
    """NVML's text (``bytes`` from older ``pynvml``); bytes that are not UTF-8 are replaced
    rather than making the GPU unreadable."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def nvml_number(value: object) -> float | None:
    """``value`` (an NVML reading: a count, mW, mJ, percent, degrees) as a float, or None
    where it is no such reading: not a number (None, ``"N/A"``), NaN or infinite, or
    negative (NVML's readings are unsigned)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]  # checked by the except
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def nvml_watts(milliwatts: object) -> float | None:
    """NVML's power reading ``milliwatts`` in watts, or None where it is no reading
    (:func:`nvml_number`) or above :data:`MAX_PLAUSIBLE_WATTS`."""
    number = nvml_number(milliwatts)
    watts = None if number is None else number / 1000.0
    return watts if watts is not None and watts <= MAX_PLAUSIBLE_WATTS else None


NVML_NO_VALUE: frozenset[int] = frozenset({2**32 - 1, 2**64 - 1})
"""NVML's unsigned "not available" (``NVML_VALUE_NOT_AVAILABLE``: every bit set, in 32 or 64
bits): no count, however large it reads."""


def nvml_count(value: object) -> int | None:
    """``value`` as the non-negative whole number NVML documents (a count, a flag, an id),
    or None for anything else (None, ``"N/A"``, a negative, fractional or non-finite
    number, NVML's all-ones "not available" (:data:`NVML_NO_VALUE`) or more than 64 bits
    hold): a field read as nonsense is one a caller cannot use, like an unsupported one."""
    count: int | None = None
    if isinstance(value, int):
        count = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        count = int(value)
    if count is None or count < 0 or count in NVML_NO_VALUE or count >= 2**64:
        return None
    return count


def _memory(mem: Any) -> tuple[int, int]:
    """``(total, used)`` bytes of NVML's memory info; used is kept within ``[0, total]``.
    Raises :class:`ValueError` (the GPU is unreadable) for a total NVML cannot mean, or one
    below :data:`MIN_GPU_MEMORY` (not in bytes)."""
    total = nvml_number(getattr(mem, "total", None))
    if total is None or not 0 < total <= MAX_GPU_MEMORY:
        raise ValueError(f"NVML reports {getattr(mem, 'total', None)!r} bytes of memory")
    if total < MIN_GPU_MEMORY:
        raise ValueError(
            f"NVML reports {getattr(mem, 'total', None)!r} bytes of memory, less than any GPU "
            "has: is the NVML binding, or a GPU-sharing shim, reporting MiB or KiB?"
        )
    used = nvml_number(getattr(mem, "used", None))
    if used is None:
        raise ValueError(f"NVML reports {getattr(mem, 'used', None)!r} bytes of memory used")
    return int(total), min(int(used), int(total))


def unnamed_gpu(memory: int) -> str:
    """The name given a GPU whose NVML name reads empty (blank, or NUL bytes only):
    ``unknown-80GiB``, its memory in whole GiB as discovery groups GPUs, so that unnamed GPUs
    of different sizes are types of their own (and nodes of their own), and no type is named
    ``""``."""
    return f"unknown-{memory // _GiB}GiB"


def _blank(name: str) -> bool:
    """Whether an NVML device name reads empty: nothing but blanks or NUL bytes."""
    return not name.replace("\x00", "").strip()


def type_from_name(name: str, memory: int) -> GpuType:
    """danlu's :class:`GpuType` for an NVML device name, with the device's real memory
    (:func:`danlu.core.cluster.gpu_type_from_device`); a name that reads empty is
    :func:`unnamed_gpu`."""
    return gpu_type_from_device(unnamed_gpu(memory) if _blank(name) else name, memory)


def handle_uuid(nvml: Any, handle: Any) -> str | None:
    """The UUID of the GPU of NVML's ``handle``; None where NVML cannot read one."""
    try:
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    except Exception:  # a lost GPU, a driver without it
        return None
    return uuid or None


def device_handle(nvml: Any, index: int, uuid: str | None = None) -> Any:
    """NVML's handle of the GPU discovered at ``index`` with ``uuid``: the handle at that
    index while the GPU there is still that one (or its UUID cannot be read), else the
    handle NVML finds by the UUID, since NVML's indices shift when a GPU leaves the driver
    (the GPU now at the index is another one). Raises NVML's error where neither finds it:
    the index's error where the index has none, the UUID's where another GPU took it."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        if uuid is None:
            raise
        try:
            return nvml.nvmlDeviceGetHandleByUUID(uuid)
        except Exception:  # not found by its UUID either: the index's error says why
            pass
        raise
    if uuid is None:
        return handle
    there = handle_uuid(nvml, handle)
    if there is None:  # no UUID to compare: the index is all there is to go by
        return handle
    return handle if there == uuid else nvml.nvmlDeviceGetHandleByUUID(uuid)


def read_gpu(nvml: Any, index: int, uuid: str | None = None) -> GpuInfo:
    """One GPU's identity, memory, utilisation, temperature and power from NVML: the GPU at
    ``index``, or, given the ``uuid`` it was discovered with, that GPU wherever NVML's index
    of it is now (:func:`device_handle`; the GpuInfo keeps ``index``). A name that reads
    empty keeps its GPU (it is readable, and usable), named :func:`unnamed_gpu`."""
    handle = device_handle(nvml, index, uuid)
    name = _text(nvml.nvmlDeviceGetName(handle))
    total, used = _memory(nvml.nvmlDeviceGetMemoryInfo(handle))
    if _blank(name):
        name = unnamed_gpu(total)

    def optional(read: Any) -> float | None:
        """The reading, or None where this GPU or driver does not support it (or answers
        with no valid reading)."""
        try:
            return nvml_number(read())
        except Exception:  # a field this GPU or driver does not support
            return None

    power_mw = optional(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
    utilization = optional(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    celsius = optional(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    return GpuInfo(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        name=name,
        gpu_type=type_from_name(name, total),
        memory_total=total,
        memory_used=used,
        utilization=None if utilization is None or utilization > 100 else utilization,
        temperature=None if celsius is None or celsius > MAX_PLAUSIBLE_CELSIUS else celsius,
        power=nvml_watts(power_mw),
    )


def mig_enabled(nvml: Any, index: int) -> bool:
    """Whether the GPU at ``index`` runs in MIG mode (its current mode; False where NVML
    cannot say: GPUs before Ampere, drivers without MIG)."""
    try:
        mode = nvml.nvmlDeviceGetMigMode(nvml.nvmlDeviceGetHandleByIndex(index))
        current = mode[0]
    except Exception:  # no MIG on this GPU or driver
        return False
    return nvml_count(current) == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)


VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def visible_entries(value: str | None) -> tuple[int | str, ...] | None:
    """The entries of a ``CUDA_VISIBLE_DEVICES`` value, in order: NVML indices (``int``) and
    ``GPU-`` UUID prefixes (``str``), or None for every GPU (unset). Read as CUDA reads it:
    entries up to the first that is neither a whole number >= 0 nor a ``GPU-`` UUID (``-1``,
    a typo, a ``MIG-`` instance) count, blanks around them ignored; empty means none."""
    if value is None:
        return None
    entries: list[int | str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if entry.isdigit() and entry.isascii():
            entries.append(int(entry))
        elif entry.startswith("GPU-") and len(entry) > len("GPU-"):
            entries.append(entry)
        else:
            break
    return tuple(entries)


def visible_devices(value: str | None) -> tuple[frozenset[int], tuple[str, ...]] | None:
    """The entries of a ``CUDA_VISIBLE_DEVICES`` value (:func:`visible_entries`) as ``(NVML
    indices, UUID prefixes)``, or None for every GPU (unset)."""
    entries = visible_entries(value)
    if entries is None:
        return None
    indices = frozenset(e for e in entries if isinstance(e, int))
    return indices, tuple(e for e in entries if isinstance(e, str))


def _hides_every_gpu(value: str) -> DeviceUnavailableError:
    """The error for a ``CUDA_VISIBLE_DEVICES`` ``value`` with no GPU entry; one naming
    MIG instances says danlu serves whole GPUs only."""
    mig = (
        ": it names MIG instances (MIG-...), which danlu does not serve (it serves whole GPUs)"
        if value.strip().startswith("MIG-")
        else ""
    )
    return DeviceUnavailableError(
        f"{VISIBLE_DEVICES}={value!r} hides every GPU{mig}; unset it, or list the GPUs to "
        "serve by NVML index or UUID (e.g. 0,1), or run without GPUs using fake ones: "
        "--fake-gpus 4x80GiB"
    )


def _served_indices(
    lib: Any, count: int, value: str, entries: tuple[int | str, ...]
) -> frozenset[int]:
    """The NVML indices (of ``count`` GPUs) that ``CUDA_VISIBLE_DEVICES`` ``value``, read
    into ``entries``, shows, by CUDA's rule: entries count up to the first that names no
    GPU (an index the machine lacks, a UUID prefix no GPU has, or one that two GPUs have:
    ambiguous), which is logged. A GPU whose UUID cannot be read matches by its index
    only. Raises :class:`DeviceUnavailableError` for a GPU named twice: CUDA then shows none
    at all."""
    uuids: dict[int, str] | None = None
    served: list[int] = []
    for entry in entries:
        if isinstance(entry, int):
            matches = [entry] if entry < count else []
        else:
            if uuids is None:
                uuids = {}
                for index in range(count):
                    with contextlib.suppress(Exception):  # unreadable: matches no UUID
                        uuid = handle_uuid(lib, lib.nvmlDeviceGetHandleByIndex(index))
                        if uuid is not None:
                            uuids[index] = uuid
            matches = [index for index, uuid in uuids.items() if uuid.startswith(entry)]
        if len(matches) != 1:
            log.warning(
                "%s entry %r names %s: it and the entries after it are not served, as CUDA "
                "reads the variable; name each GPU by its index or a longer UUID",
                VISIBLE_DEVICES,
                entry,
                "no GPU of this host" if not matches else f"{len(matches)} GPUs",
            )
            break
        if matches[0] in served:
            raise DeviceUnavailableError(
                f"{VISIBLE_DEVICES}={value!r} names GPU {matches[0]} twice ({entry!r}), so "
                "CUDA shows no GPU at all; list each GPU once (e.g. 0,1)"
            )
        served.append(matches[0])
    return frozenset(served)


DEVICE_ORDER = "CUDA_DEVICE_ORDER"


def _warn_of_index_order(
    lib: Any, count: int, value: str, entries: tuple[int | str, ...], order: str | None
) -> None:
    """Warn where ``CUDA_VISIBLE_DEVICES`` ``value`` names GPUs by index on a host with GPUs
    of more than one model while ``CUDA_DEVICE_ORDER`` (``order``) is not ``PCI_BUS_ID``:
    danlu reads an index as NVML's (PCI bus order, as ``nvidia-smi``), CUDA then as its own
    (fastest GPU first), so the GPUs served may not be the ones CUDA would show. Only the
    GPUs' names are read (a GPU whose name cannot be read counts as no model)."""
    if order == "PCI_BUS_ID" or not any(isinstance(e, int) for e in entries):
        return
    models: set[str] = set()
    for index in range(count):
        with contextlib.suppress(Exception):  # unreadable: no model to count
            name = _text(lib.nvmlDeviceGetName(lib.nvmlDeviceGetHandleByIndex(index)))
            if not _blank(name):
                models.add(name.strip())
    if len(models) > 1:
        log.warning(
            "%s=%r names GPUs by index on a host with GPUs of %d models (%s): danlu serves "
            "NVML's indices (PCI bus order, as nvidia-smi -L lists them), which CUDA numbers "
            "alike only with %s=PCI_BUS_ID (fastest first otherwise); name the GPUs by UUID "
            "(nvidia-smi -L) to be sure which are served",
            VISIBLE_DEVICES,
            value,
            len(models),
            ", ".join(sorted(models)),
            DEVICE_ORDER,
        )


def discover(
    nvml: ModuleType | Any | None = None,
    hostname: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Inventory:
    """This host's GPUs from NVML, grouped into one node per GPU type (in device order).

    Only the GPUs ``CUDA_VISIBLE_DEVICES`` of ``environ`` shows are served (see the module
    docstring); one it hides is never read (but for its name, where the variable names
    GPUs by index: on a host with GPUs of two models a warning says that CUDA numbers them
    otherwise unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, also read from ``environ``). The
    caller passes its process's environment (the server reads it in :mod:`danlu.config`,
    its one reader of the environment); None serves every GPU.

    A GPU NVML cannot read (one that fell off the bus answers ``GPU_IS_LOST``) is left out
    of the inventory, with a warning logged: the GPUs NVML can read are served, and the one
    left out is taken back by a restart once it is mended. A GPU whose name reads empty is
    served, named :func:`unnamed_gpu`, with a warning logged. A GPU in MIG mode is left out,
    with a warning logged: a job given its index sees one MIG instance of it (a fraction of
    its memory), not the whole GPU the scheduler would count. Raises
    :class:`DeviceUnavailableError` (with the fix) when NVML is missing, cannot count the
    GPUs, finds none, or can read (or serve) none of them."""
    env: Mapping[str, str] = {} if environ is None else environ
    shown = env.get(VISIBLE_DEVICES)
    entries = visible_entries(shown)
    if shown is not None and not entries:
        raise _hides_every_gpu(shown)
    lib = load_nvml(nvml)
    host = hostname or socket.gethostname()
    gpus: list[GpuInfo] = []
    unreadable: list[str] = []
    try:
        try:
            answer = lib.nvmlDeviceGetCount()
        except Exception as exc:
            raise DeviceUnavailableError(
                f"NVML failed counting the GPUs ({exc}); {_NVML_HINT}"
            ) from None
        counted = nvml_count(answer)
        if counted is None or counted > MAX_GPUS_PER_NODE:
            raise DeviceUnavailableError(
                f"NVML counts {answer!r} GPUs, which no host has (0..{MAX_GPUS_PER_NODE}): "
                f"the driver is in a bad state; reload it or reboot, or {_NVML_HINT}"
            )
        count = counted
        served = (
            range(count)
            if shown is None or entries is None
            else sorted(_served_indices(lib, count, shown, entries))
        )
        if shown is not None and entries is not None:
            _warn_of_index_order(lib, count, shown, entries, env.get(DEVICE_ORDER))
        for index in served:
            # before its readings: a GPU in MIG mode may answer NOT_SUPPORTED for some,
            # and is then told to be reset, not to leave MIG mode
            if mig_enabled(lib, index):
                log.warning(
                    "GPU %d is in MIG mode: it is left out of the inventory (a job would see "
                    "one MIG instance, not the whole GPU); disable MIG (nvidia-smi -i %d "
                    "-mig 0, then reset the GPU), then restart danlu to use it",
                    index,
                    index,
                )
                unreadable.append(f"GPU {index}: in MIG mode")
                continue
            try:
                gpu = read_gpu(lib, index)
            except Exception as exc:  # e.g. GPU_IS_LOST: this GPU only, not the host's
                log.warning(
                    "GPU %d cannot be read (%s): it is left out of the inventory; reset it "
                    "(nvidia-smi -r) or reboot, then restart danlu to use it",
                    index,
                    exc,
                )
                unreadable.append(f"GPU {index}: {exc}")
                continue
            if gpu.name == unnamed_gpu(gpu.memory_total):
                log.warning(
                    "GPU %d's NVML name reads empty: it is served as GPU type %s; check "
                    "nvidia-smi -L (the driver may need a reload), then restart danlu",
                    index,
                    gpu.name,
                )
            gpus.append(gpu)
    finally:
        with contextlib.suppress(Exception):  # shutting down is best effort
            lib.nvmlShutdown()
    if unreadable and not gpus:
        raise DeviceUnavailableError(
            f"none of NVML's {len(unreadable)} GPUs can be served ({'; '.join(unreadable)}); "
            f"{_NVML_HINT}"
        )
    if not gpus:
        which = "" if shown is None else f" of those {VISIBLE_DEVICES}={shown!r} shows"
        raise DeviceUnavailableError(f"NVML found no GPU{which}; {_NVML_HINT}")
    groups: dict[tuple[str, int], list[GpuInfo]] = {}
    for gpu in gpus:
        groups.setdefault((gpu.gpu_type.name, gpu.memory_total // _GiB), []).append(gpu)
    nodes = tuple(
        NodeInventory(host if len(groups) == 1 else f"{host}-{i}", host, tuple(members))
        for i, members in enumerate(groups.values())
    )
    return Inventory(nodes, "nvml")
