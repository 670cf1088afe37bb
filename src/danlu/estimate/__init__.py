"""Estimates before launch: a training step's GPU memory (:mod:`danlu.estimate.memory`),
throughput and goodput models, the batch-size and GPU-count optimiser, LR scaling rules.

The memory estimate as one call, what ``danlu estimate`` prints::

    from danlu.estimate import estimate_memory

    report = estimate_memory("danlu.estimate.zoo:gpt2_tiny", 8, precision="bf16", gpu="h100")
    report.estimate.peak_device_bytes   # the step's peak on the GPU, CUDA context included
    report.submit_gpu_memory_bytes      # the resources.gpu_memory to submit for it

``sweep=[...]`` and ``max_batch=True`` add M(b)'s rows and the largest batch that fits
(:func:`~danlu.estimate.report.estimate_memory`). The names here are imported when first
used: importing :mod:`danlu.estimate` or one of its modules imports no more than that module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from danlu.estimate.memory.gpus import GpuSpec
    from danlu.estimate.memory.predict import MemoryEstimate, auto_gpu_memory
    from danlu.estimate.report import MaxBatchAnswer, MemoryReport, SweepRow, estimate_memory

_EXPORTS = {
    "estimate_memory": "danlu.estimate.report",
    "MemoryReport": "danlu.estimate.report",
    "SweepRow": "danlu.estimate.report",
    "MaxBatchAnswer": "danlu.estimate.report",
    "MemoryEstimate": "danlu.estimate.memory.predict",
    "auto_gpu_memory": "danlu.estimate.memory.predict",
    "GpuSpec": "danlu.estimate.memory.gpus",
}
"""Each name this package exports and the module defining it (imported on first use)."""

__all__ = [
    "GpuSpec",
    "MaxBatchAnswer",
    "MemoryEstimate",
    "MemoryReport",
    "SweepRow",
    "auto_gpu_memory",
    "estimate_memory",
]


def __getattr__(name: str) -> Any:
    """An exported name, imported from its module on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'danlu.estimate' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
