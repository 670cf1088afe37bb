"""From traces to per-GPU predictions: allocator replay and the fitted memory model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from danlu.core.errors import SpecError
from danlu.estimate.memory.allocator import CachingAllocatorModel
from danlu.estimate.memory.fit import (
    DEFAULT_MAX_EXTRAPOLATION,
    ExtrapolationError,
    PiecewiseLinearFit,
    fit_piecewise_linear,
)
from danlu.estimate.memory.gpus import GpuSpec
from danlu.estimate.memory.trace_result import StepTrace, TraceRequest
from danlu.estimate.memory.tracer import Progress, trace


@dataclass
class MemoryEstimate:
    """Predicted peak memory of one steady-state training step at one batch size on one GPU.

    ``peak_logical_bytes``: live tensor bytes at the step's peak (exact, from the trace).
    ``peak_allocated_bytes`` / ``peak_reserved_bytes``: what ``torch.cuda.max_memory_allocated``
    / ``max_memory_reserved`` would report over the step (caching allocator model, cuBLAS
    workspaces included). ``peak_device_bytes``: reserved plus the CUDA context, i.e. what the
    process holds on the GPU; ``fits`` compares it with the GPU's capacity.
    """

    batch_size: int
    gpu: str
    peak_logical_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    context_bytes: int
    peak_device_bytes: int
    capacity_bytes: int
    fits: bool
    breakdown: dict[str, int]
    step_start_bytes: int
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (all sizes integers, in bytes)."""
        return asdict(self)


def replay(tr: StepTrace, gpu: GpuSpec) -> MemoryEstimate:
    """Run a trace's allocation sequence through the caching-allocator model for ``gpu``."""
    alloc = CachingAllocatorModel(max(0, gpu.capacity_bytes - gpu.context_bytes) or None)
    host = frozenset(tr.host_ids)
    sites: dict[int, list[tuple[str, int]]] = {}
    for idx, kind, hint in tr.sites:
        sites.setdefault(idx, []).append((kind, hint))
    start, end = tr.marks["measure_start"], tr.marks["measure_end"]
    pseudo = -1
    peak_alloc = peak_res = 0
    handles = 0
    for i, (sid, delta) in enumerate(tr.events):
        if i == start:
            peak_alloc, peak_res = alloc.stats.allocated, alloc.stats.reserved
        for kind, hint in sites.get(i, ()):
            if kind == "cublas" and handles < gpu.cublas_handles:
                handles += 1
                pseudo -= 1
                alloc.malloc(pseudo, gpu.cublas_workspace_bytes)
            elif kind == "conv" and gpu.conv_workspace_ratio > 0:
                pseudo -= 1
                alloc.malloc(pseudo, int(hint * gpu.conv_workspace_ratio))
                alloc.free(pseudo)
            elif kind == "attn_bwd":
                pseudo -= 1
                alloc.malloc(pseudo, hint)
                alloc.free(pseudo)
        if sid in host:
            continue
        if delta > 0:
            alloc.malloc(sid, delta)
        else:
            alloc.free(sid)
        if i >= start:
            peak_alloc = max(peak_alloc, alloc.stats.allocated)
            peak_res = max(peak_res, alloc.stats.reserved)
        if i + 1 >= end:
            break
    device = peak_res + gpu.context_bytes
    warnings = list(tr.warnings)
    if alloc.stats.ooms:
        warnings.append(
            f"out of memory on {gpu.name}: {alloc.stats.ooms} allocation(s) did "
            "not fit even after releasing cached segments"
        )
    return MemoryEstimate(
        batch_size=tr.batch_size,
        gpu=gpu.name,
        peak_logical_bytes=tr.peak_logical_bytes,
        peak_allocated_bytes=peak_alloc,
        peak_reserved_bytes=peak_res,
        context_bytes=gpu.context_bytes,
        peak_device_bytes=device,
        capacity_bytes=gpu.capacity_bytes,
        fits=device <= gpu.capacity_bytes and not alloc.stats.ooms,
        breakdown=dict(tr.breakdown),
        step_start_bytes=tr.step_start_bytes,
        warnings=warnings,
    )


class FittedMemoryModel:
    """M(b) for one model, precision, optimizer and GPU type, fitted from a few traces.

    Satisfies :class:`~danlu.estimate.memory.model.MemoryModel`. At traced batch sizes it is
    exact (the replayed trace); elsewhere the logical peak comes from the piecewise-linear fit
    and the reserved peak is ``logical * (1 + frag) + workspaces``: the cuBLAS workspaces plus
    the caching allocator's overhead (rounding, segment slack) relative to the logical peak as
    replayed at the largest traced batch size.
    """

    def __init__(
        self,
        estimates: Sequence[MemoryEstimate],
        gpu: GpuSpec,
        max_extrapolation: float = DEFAULT_MAX_EXTRAPOLATION,
    ) -> None:
        if len(estimates) < 2:
            raise SpecError("--sweep", "fitting M(b) needs at least two traced batch sizes")
        self.gpu = gpu
        self.estimates = {e.batch_size: e for e in estimates}
        self.logical: PiecewiseLinearFit = fit_piecewise_linear(
            {b: e.peak_logical_bytes for b, e in self.estimates.items()},
            max_extrapolation=max_extrapolation,
            what="the logical peak",
        )
        top = self.estimates[max(self.estimates)]
        self.fixed = gpu.cublas_workspace_bytes * gpu.cublas_handles
        self.frag = max(
            0.0,
            (top.peak_reserved_bytes - self.fixed - top.peak_logical_bytes)
            / max(1, top.peak_logical_bytes),
        )

    def predict_logical(self, batch_size: int) -> int:
        """Live tensor bytes at the step's peak."""
        return self.logical(batch_size)

    def predict_reserved(self, batch_size: int) -> int:
        """Caching-allocator reserved bytes at the step's peak."""
        if batch_size in self.estimates:
            return self.estimates[batch_size].peak_reserved_bytes
        return int(self.logical(batch_size) * (1 + self.frag)) + self.fixed

    def predict(self, batch_size: int) -> int:
        """Peak bytes per GPU: reserved plus the CUDA context (see ``MemoryModel``)."""
        return self.predict_reserved(batch_size) + self.gpu.context_bytes

    def max_batch(self, limit_bytes: int, margin_bytes: int = 0) -> int | None:
        """Largest b with ``predict(b) <= limit_bytes - margin_bytes``, within the range the fit
        supports (at most ``max_extrapolation`` times the largest traced b); None if b=1 does
        not fit."""
        budget = limit_bytes - margin_bytes
        hi = int(max(self.estimates) * self.logical.max_extrapolation)

        def ok(b: int) -> bool:
            try:
                return self.predict(b) <= budget
            except ExtrapolationError:
                return False

        if not ok(1):
            return None
        lo = 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo


def estimate_memory(
    req: TraceRequest, gpu: GpuSpec, progress: Progress | None = None
) -> list[MemoryEstimate]:
    """Trace ``req`` (every batch size in one subprocess) and replay each trace for ``gpu``."""
    return [replay(t, gpu) for t in trace(req, progress)]


def fit_memory_model(
    req: TraceRequest, gpu: GpuSpec, progress: Progress | None = None, max_extra_rounds: int = 2
) -> FittedMemoryModel:
    """Trace ``req.batch_sizes`` (e.g. 1, 2, 4) and fit M(b); when every point is dominated by
    the optimizer-step peak, trace larger batches (x4, x8) up to ``max_extra_rounds`` times."""
    estimates = estimate_memory(req, gpu, progress)
    model = FittedMemoryModel(estimates, gpu)
    for _ in range(max_extra_rounds):
        if model.logical.slope_known:
            break
        bmax = max(model.estimates)
        more = TraceRequest(
            **{**req.to_json(), "batch_sizes": (bmax * 4, bmax * 8), "sys_path": req.sys_path}
        )
        estimates += estimate_memory(more, gpu, progress)
        model = FittedMemoryModel(estimates, gpu)
    return model
