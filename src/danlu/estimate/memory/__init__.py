"""GPU memory of a training step, predicted before launch (no torch imported here).

* :func:`trace` / :func:`estimate_memory`: trace steps under FakeTensorMode in a subprocess and
  replay them through a model of PyTorch's CUDA caching allocator for a GPU type;
* :class:`FittedMemoryModel`: M(b) = max(C_step, C0 + a*b) from a few traces;
* :mod:`.analytic`: closed-form estimates for transformer configurations too large to trace;
* :class:`MemoryModel`: the protocol the batch-size and GPU-count optimisers consume.
"""

from __future__ import annotations

from danlu.estimate.memory.allocator import CachingAllocatorModel
from danlu.estimate.memory.analytic import TransformerConfig, TransformerMemory, transformer_memory
from danlu.estimate.memory.fit import (
    ExtrapolationError,
    PiecewiseLinearFit,
    fit_piecewise_linear,
    fit_two_phase,
)
from danlu.estimate.memory.gpus import (
    GPUS,
    GpuSpec,
    get_gpu,
    gpu_for_device,
    gpu_for_memory,
    load_gpu_table,
)
from danlu.estimate.memory.model import MemoryModel
from danlu.estimate.memory.predict import (
    FittedMemoryModel,
    MemoryEstimate,
    auto_gpu_memory,
    estimate_memory,
    fit_memory_model,
    replay,
)
from danlu.estimate.memory.trace_result import LoneSampleError, StepTrace, TraceRequest
from danlu.estimate.memory.tracer import WarmTracers, trace

__all__ = [
    "GPUS",
    "CachingAllocatorModel",
    "ExtrapolationError",
    "FittedMemoryModel",
    "GpuSpec",
    "LoneSampleError",
    "MemoryEstimate",
    "MemoryModel",
    "PiecewiseLinearFit",
    "StepTrace",
    "TraceRequest",
    "TransformerConfig",
    "TransformerMemory",
    "WarmTracers",
    "auto_gpu_memory",
    "estimate_memory",
    "fit_memory_model",
    "fit_piecewise_linear",
    "fit_two_phase",
    "get_gpu",
    "gpu_for_device",
    "gpu_for_memory",
    "load_gpu_table",
    "replay",
    "trace",
    "transformer_memory",
]
