"""``gpu_memory: auto``: predict a job's peak GPU memory before admission.

Runs :func:`danlu.estimate.memory.estimate_memory` (which traces in a subprocess) in a worker
thread with a timeout, OUTSIDE any database transaction. On any failure the job falls back to
whole GPUs and the reason says so.
"""

from __future__ import annotations

import concurrent.futures
import logging
from dataclasses import dataclass

from danlu.core.cluster import Cluster
from danlu.core.spec import JobSpec

log = logging.getLogger(__name__)
DEFAULT_GPU = "a100-80gb"


@dataclass(frozen=True, slots=True)
class Estimate:
    """The resolved bytes per GPU (``None``: whole GPUs) and a note for the pending reason."""

    gpu_memory: int | None
    note: str | None = None


def _gpu_name(spec: JobSpec, cluster: Cluster) -> str:
    wanted = [t.lower() for t in spec.resources.gpu_type]
    for node in cluster.nodes:
        if not wanted or node.gpu_type.name.lower() in wanted:
            return node.gpu_type.name
    return DEFAULT_GPU


def _predict(model_ref: str, batch_size: int, gpu_name: str) -> int:
    from danlu.core.errors import UnknownNameError
    from danlu.estimate.memory import TraceRequest, estimate_memory, get_gpu

    try:
        gpu = get_gpu(gpu_name)
    except UnknownNameError:
        gpu = get_gpu(DEFAULT_GPU)
    estimates = estimate_memory(TraceRequest(model_ref, (batch_size,)), gpu)
    return max(e.peak_device_bytes for e in estimates)


def resolve_gpu_memory(spec: JobSpec, cluster: Cluster, timeout: float) -> Estimate:
    """The per-GPU bytes to admit ``spec`` with: the explicit value, the estimate for
    ``auto`` with a ``training.model``, or whole GPUs (``None``) with a note why."""
    memory = spec.resources.gpu_memory
    if memory != "auto":
        return Estimate(memory if isinstance(memory, int) and memory > 0 else None)
    model = spec.training.model
    if not model:
        return Estimate(None, "gpu_memory: auto without training.model: using whole GPUs")
    hints = spec.training
    batch = hints.min_batch_size or hints.global_batch_size or 1
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="danlu-estimate")
    try:
        future = pool.submit(_predict, model, batch, _gpu_name(spec, cluster))
        value = future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        return Estimate(None, f"memory estimate timed out after {timeout:g}s: using whole GPUs")
    except Exception as exc:  # the tracer runs arbitrary user models: any failure falls back
        log.info("memory estimate of %s failed: %s", model, exc)
        return Estimate(None, f"memory estimate failed ({exc}): using whole GPUs")
    finally:
        pool.shutdown(wait=False)
    return Estimate(int(value), f"gpu_memory estimated at {value} bytes per GPU")
