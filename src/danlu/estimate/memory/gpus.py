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
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path

from danlu.core.cluster import gpu_type_from_device
from danlu.core.errors import ConfigError, UnknownNameError

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


def _g(name: str, cap_gib: float, ctx_mib: float, cc: str) -> GpuSpec:
    ws = _CUBLAS_HOPPER if cc.startswith("9") else _CUBLAS_PRE_HOPPER
    return GpuSpec(name, int(cap_gib * GiB), int(ctx_mib * MiB), ws, compute_capability=cc)


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        _g("h100", 79.19, 520, "9.0"),  # H100 80GB HBM3 (SXM/PCIe)
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

ALIASES = {"a100": "a100-80gb", "v100": "v100-32gb", "4090": "rtx4090", "rtx-4090": "rtx4090"}


def load_gpu_table(path: str | Path | None = None) -> dict[str, GpuSpec]:
    """The built-in table, with entries of the JSON file ``path`` overriding or adding GPUs.

    The file maps GPU names to objects with any of :class:`GpuSpec`'s fields, e.g.
    ``{"h100": {"context_bytes": 547356672}}``.
    """
    table = dict(GPUS)
    if path is None:
        return table
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--gpu-table: cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"--gpu-table: {path} must hold a JSON object of GPU names")
    for name, fields in data.items():
        key = gpu_key(name)
        if not isinstance(fields, dict):
            raise ConfigError(
                f"--gpu-table: entry {name!r} in {path} must be an object of GpuSpec fields, "
                f'e.g. {{"capacity_bytes": 85031714816}}, got {fields!r}'
            )
        base = table.get(key, GpuSpec(key, 0, 0, _CUBLAS_PRE_HOPPER))
        changes = {k: v for k, v in fields.items() if k != "name"}
        for field_name, value in changes.items():
            problem = _field_problem(field_name, value)
            if problem:
                raise ConfigError(f"--gpu-table: entry {name!r} in {path}: {problem}")
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
    return ""


def gpu_key(name: str) -> str:
    """The table key of a GPU name, as both :func:`load_gpu_table` and :func:`get_gpu` read
    it: lower case, ``_`` as ``-``, aliases resolved (``RTX_4090`` -> ``rtx4090``)."""
    key = name.lower().replace("_", "-")
    return ALIASES.get(key, key)


def get_gpu(name: str, table: dict[str, GpuSpec] | None = None) -> GpuSpec:
    """Look a GPU type up by name (case-insensitive, ``_`` read as ``-``; ``a100`` means the
    80 GB one)."""
    table = table if table is not None else GPUS
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
    ``total_memory`` the device reports (a smaller variant than the table's entry)."""
    kind = gpu_type_from_device(device_name, total_memory)
    spec = get_gpu(kind.name, table)
    if 0 < total_memory < spec.capacity_bytes:
        spec = replace(spec, capacity_bytes=total_memory)
    return spec
