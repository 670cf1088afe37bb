"""From traces to per-GPU predictions: allocator replay and the fitted memory model."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from danlu.core.errors import SpecError
from danlu.core.units import format_bytes
from danlu.core.values import is_whole_number, quoted
from danlu.estimate.checks import check_finite
from danlu.estimate.family import ModelSummary, infer_family
from danlu.estimate.memory.allocator import CachingAllocatorModel
from danlu.estimate.memory.fit import (
    DEFAULT_MAX_EXTRAPOLATION,
    EnvelopeFit,
    ExtrapolationError,
    PiecewiseLinearFit,
    fit_piecewise_linear,
    fit_two_phase,
)
from danlu.estimate.memory.gpus import GpuSpec
from danlu.estimate.memory.trace_result import StepTrace, TraceRequest
from danlu.estimate.memory.tracer import Progress, WarmTracers, trace


@dataclass
class MemoryEstimate:
    """Predicted peak memory of one steady-state training step at one batch size on one GPU.

    ``peak_logical_bytes``: live tensor bytes at the step's peak (exact, from the trace).
    ``peak_allocated_bytes`` / ``peak_reserved_bytes``: what ``torch.cuda.max_memory_allocated``
    / ``max_memory_reserved`` would report over the step (caching allocator model, cuBLAS
    workspaces included). ``peak_device_bytes``: reserved plus the CUDA context, i.e. what the
    process holds on the GPU; ``fits`` compares it with the GPU's capacity.

    ``breakdown`` splits ``peak_logical_bytes`` by what the live tensors are, at the peak:
    a part not live there shows less than its own size (the gradients are freed after each
    optimizer step, so a peak in the forward pass holds none). ``gradient_bytes`` is the
    gradients' own size and ``peak_phase`` the phase of the step the peak is in
    (``forward``, ``backward``, ``optimizer``, ``zero_grad``; ``""``: not known);
    ``breakdown_notes`` says, by breakdown key, why a part shows less than its size
    (:func:`gradients_note`).
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
    window_live: list[int] = field(default_factory=list, repr=False)
    phase_peaks: dict[str, int] = field(default_factory=dict)
    family: str | None = None
    """The model's family for the GPU-sharing interference model, inferred from the traced
    layers (:func:`danlu.estimate.family.infer_family`; ``None``: none recognised)."""
    gradient_bytes: int = 0
    peak_phase: str = ""
    breakdown_notes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (all sizes integers, in bytes; without the step's live curve)."""
        out = asdict(self)
        out.pop("window_live")
        return out


CONV_WORKSPACE_WARNING = (
    "cuDNN convolution workspaces are not counted (the GPU's heuristics size them: up to "
    "140 MB at one layer on an H200, where the zoo's CNNs were under-predicted by 1-69 %); "
    "leave a margin, or calibrate conv_workspace_ratio with --gpu-table"
)
"""Added to an estimate for a GPU whose table entry has no convolution-workspace ratio, when
the traced step has convolutions."""


def replay(tr: StepTrace, gpu: GpuSpec, limit_source: str | None = None) -> MemoryEstimate:
    """Run a trace's allocation sequence through the caching-allocator model for ``gpu``.

    ``limit_source`` names what ``gpu.capacity_bytes`` is when it is not the GPU's own
    capacity (``"--gpu-memory"``: a share of one GPU); the out-of-memory warning says so.

    The allocator is not capped at the GPU's capacity: the peaks are what the step reserves
    when nothing forces cached segments back, and ``fits`` compares them with the capacity.
    Capped, a step over the capacity was answered by when the replay happened to release
    cached segments, which depends on the capacity in no orderly way: gpt2_tiny's largest
    batch was 96 on 1016 MiB and 91 on 1020 MiB (a later release came too late there)."""
    alloc = CachingAllocatorModel()
    host = frozenset(tr.host_ids)
    sites: dict[int, list[tuple[str, int]]] = {}
    convolutions = False
    for idx, kind, hint in tr.sites:
        sites.setdefault(idx, []).append((kind, hint))
        convolutions = convolutions or kind == "conv"
    start, end = tr.marks["measure_start"], tr.marks["measure_end"]
    pseudo = -1
    peak_alloc = peak_res = 0
    handles = 0
    sizes: dict[int, int] = {}  # the bytes of each live storage, as the events left it
    for i, (sid, delta) in enumerate(tr.events):
        if i == start:
            peak_alloc, peak_res = alloc.stats.allocated, alloc.stats.reserved
        for kind, hint in sites.get(i, ()):
            if kind == "cublas" and handles < gpu.cublas_handles:
                handles += 1
                pseudo -= 1
                alloc.malloc(pseudo, gpu.cublas_workspace_bytes)
                continue
            if kind == "conv" and gpu.conv_workspace_ratio > 0:
                size = int(hint * gpu.conv_workspace_ratio)
            elif kind == "attn_bwd":
                size = hint
            else:
                continue
            # a transient workspace, live with the op's outputs (the site follows them):
            # it counts towards the peaks before it is freed
            pseudo -= 1
            alloc.malloc(pseudo, size)
            if i >= start:
                peak_alloc = max(peak_alloc, alloc.stats.allocated)
                peak_res = max(peak_res, alloc.stats.reserved)
            alloc.free(pseudo)
        if sid in host:
            continue
        # a later event of a live storage resizes it in place (the tracer's StorageTracker
        # records the change): on a GPU a block of the new size replaces the old one. As a
        # block of the change's size, the old block was never freed, and a shrink freed all
        before = sizes.pop(sid, 0)
        after = before + delta
        if after > 0:
            sizes[sid] = after
            if before > 0:
                alloc.resize(sid, after)
            else:
                alloc.malloc(sid, after)
        else:
            alloc.free(sid)
        if i >= start:
            peak_alloc = max(peak_alloc, alloc.stats.allocated)
            peak_res = max(peak_res, alloc.stats.reserved)
        if i + 1 >= end:
            break
    device = peak_res + gpu.context_bytes
    warnings = list(tr.warnings)
    if convolutions and gpu.conv_workspace_ratio <= 0:
        warnings.append(CONV_WORKSPACE_WARNING)
    if device > gpu.capacity_bytes:
        warnings.append(out_of_memory_warning(gpu, device, limit_source))
    return MemoryEstimate(
        batch_size=tr.batch_size,
        gpu=gpu.name,
        peak_logical_bytes=tr.peak_logical_bytes,
        peak_allocated_bytes=peak_alloc,
        peak_reserved_bytes=peak_res,
        context_bytes=gpu.context_bytes,
        peak_device_bytes=device,
        capacity_bytes=gpu.capacity_bytes,
        fits=device <= gpu.capacity_bytes,
        breakdown=dict(tr.breakdown),
        step_start_bytes=tr.step_start_bytes,
        warnings=warnings,
        phase_peaks=dict(tr.phase_peaks),
        window_live=list(tr.window_live),
        family=infer_family(summarize(tr)),
        gradient_bytes=tr.gradient_bytes,
        peak_phase=tr.peak_phase,
        breakdown_notes=_breakdown_notes(tr),
    )


_PHASE_WORDS = {
    "forward": "the forward pass",
    "backward": "the backward pass",
    "optimizer": "the optimizer step",
    "zero_grad": "zero_grad",
}
"""The phases of a traced step (:attr:`StepTrace.peak_phase`) in words."""


def gradients_note(live_bytes: int, gradient_bytes: int, peak_phase: str) -> str | None:
    """Why the breakdown's ``gradients`` at the peak (``live_bytes``) is less than the
    gradients' own size (``gradient_bytes``), for a peak in ``peak_phase``; None when it is
    not. A step frees its gradients after the optimizer step (``zero_grad(set_to_none=True)``,
    as ``danlu.train`` does) and the backward pass makes them again, so a peak in the forward
    pass holds none: the breakdown's ``gradients 0B`` read as if they were not counted."""
    if gradient_bytes <= 0 or live_bytes >= gradient_bytes:
        return None
    size = f"{format_bytes(gradient_bytes)} ({gradient_bytes} bytes)"
    where = _PHASE_WORDS.get(peak_phase, "")
    if live_bytes > 0:
        made = " that makes them" if peak_phase == "backward" else ""
        return f"{format_bytes(live_bytes)} of their {size} live at the peak" + (
            f", in {where}{made}" if where else ""
        )
    held = f"their own size is {size}, held from the backward pass to the optimizer step"
    freed = "the step before freed them (zero_grad(set_to_none=True))"
    if peak_phase == "forward":
        return (
            f"not live at the peak, in the forward pass: {freed} and this step's backward "
            f"pass makes them again; {held}"
        )
    if peak_phase == "backward":
        return f"not live at the peak, in the backward pass before it makes them: {freed}; {held}"
    return f"not live at the peak{f', in {where}' if where else ''}; their own size is {size}"


def _breakdown_notes(tr: StepTrace) -> dict[str, str]:
    """:attr:`MemoryEstimate.breakdown_notes` of a trace."""
    note = gradients_note(tr.breakdown.get("gradients", 0), tr.gradient_bytes, tr.peak_phase)
    return {"gradients": note} if note else {}


def auto_gpu_memory(estimates: Iterable[MemoryEstimate]) -> int:
    """The per-GPU memory share ``gpu_memory: auto`` charges a job, from ``estimates`` of
    its step at the batch one GPU runs, one per GPU type it may land on: the largest peak on
    the GPU (:attr:`MemoryEstimate.peak_device_bytes`, the allocator's reserved peak plus
    the CUDA context), exactly, with no headroom added (the launch caps the micro-batch
    within the share). The control plane resolves ``auto`` with it, and ``danlu estimate``
    names it as the ``gpu_memory`` to submit; raises ValueError without an estimate."""
    peaks = [e.peak_device_bytes for e in estimates]
    if not peaks:
        raise ValueError("auto_gpu_memory needs the estimate of one GPU type at least")
    return max(peaks)


def out_of_memory_warning(gpu: GpuSpec, peak_bytes: int, limit_source: str | None) -> str:
    """The warning for a step whose ``peak_bytes`` on the GPU is over ``gpu.capacity_bytes``:
    both in readable units with the bytes, and what the limit is (``limit_source``, else the
    GPU's capacity). It said "over its 104857600 bytes" for a ``--gpu-memory 100MiB``, as if
    that were the h100's memory."""
    limit = gpu.capacity_bytes
    source = limit_source or f"the {gpu.name}'s capacity"
    return (
        f"out of memory on {gpu.name}: the step's peak of {format_bytes(peak_bytes)} "
        f"({peak_bytes} bytes) is over the {format_bytes(limit)} ({limit} bytes) it is "
        f"judged against ({source})"
    )


def summarize(tr: StepTrace) -> ModelSummary:
    """The traced model's layers, the activation bytes one sample keeps (the peak of the
    forward and backward passes above what the step starts with, over the batch) and its
    calls of torch's fused attention."""
    passes = tr.phase_peaks.get("passes", tr.peak_logical_bytes)
    per_sample = max(passes - tr.step_start_bytes, 0) / max(tr.batch_size, 1)
    return ModelSummary(
        dict(tr.modules), dict(tr.module_parameters), per_sample, tr.attention_calls
    )


def synthesize(a: StepTrace, b: StepTrace, batch_size: int) -> StepTrace | None:
    """The allocation sequence at ``batch_size``, interpolated (or extrapolated) event by event
    from traces ``a`` and ``b`` of the same program at two other batch sizes; None when the two
    sequences do not line up."""
    ba, bb = a.batch_size, b.batch_size
    if ba == bb or a.marks != b.marks:
        return None
    if [(i, k) for i, k, _ in a.sites] != [(i, k) for i, k, _ in b.sites]:
        return None

    def lerp(x: int, y: int) -> int:
        return max(0, round((x * (bb - batch_size) + y * (batch_size - ba)) / (bb - ba)))

    def growths(tr: StepTrace) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for sid, d in tr.events:
            if d > 0:
                out.setdefault(sid, []).append(d)
        return out

    ga, gb = growths(a), growths(b)  # storages are numbered in allocation order
    if ga.keys() != gb.keys() or any(len(ga[k]) != len(gb[k]) for k in ga):
        return None
    seen: dict[int, int] = {}
    sizes: dict[int, int] = {}
    events: list[tuple[int, int]] = []
    for sid, d in b.events:  # b's order (frees may come in another order than in a)
        if d > 0:
            k = seen.get(sid, 0)
            seen[sid] = k + 1
            n = lerp(ga[sid][k], gb[sid][k])
            sizes[sid] = sizes.get(sid, 0) + n
            events.append((sid, n))
        else:
            events.append((sid, -sizes.pop(sid, 0)))
    sites = [(i, k, lerp(h1, h2)) for (i, k, h1), (_, _, h2) in zip(a.sites, b.sites, strict=True)]
    return StepTrace(
        batch_size=batch_size,
        events=events,
        marks=dict(b.marks),
        peak_logical_bytes=0,
        step_start_bytes=0,
        breakdown={},
        sites=sites,
        host_ids=list(a.host_ids),
    )


class FittedMemoryModel:
    """M(b) for one model, precision, optimizer and GPU type, fitted from a few traces.

    Satisfies :class:`~danlu.estimate.memory.model.MemoryModel`. At traced batch sizes it is
    exact (the replayed trace); elsewhere the logical peak comes from the piecewise-linear fit
    and the reserved peak is ``logical * (1 + frag) + workspaces``: the cuBLAS workspaces plus
    the caching allocator's overhead (rounding, segment slack) relative to the logical peak as
    replayed at the largest traced batch size.

    Every prediction is non-decreasing in b (:class:`_RunningMax`): the logical peak at b is
    the largest value above at any batch size ``1..b``; the reserved peak the largest at the
    batch sizes of :func:`next_replay_point` up to the first one at or above b (every b up to
    128, then points 1/64 apart, the traced batches and :attr:`max_batch_cap`: one replay
    each, kept). The allocator replay is not monotone by itself (gpt2_tiny: 100, 98, 100,
    98 MiB reserved at b = 8..11, as segments pack differently), and :meth:`max_batch`
    promises that every batch up to its answer fits.
    """

    def __init__(
        self,
        estimates: Sequence[MemoryEstimate],
        gpu: GpuSpec,
        max_extrapolation: float = DEFAULT_MAX_EXTRAPOLATION,
        traces: Sequence[StepTrace] = (),
    ) -> None:
        if len(estimates) < 2:
            raise SpecError("--sweep", "fitting M(b) needs at least two traced batch sizes")
        self.gpu = gpu
        self.estimates = {e.batch_size: e for e in estimates}
        ests = self.estimates.values()
        self.logical: PiecewiseLinearFit | EnvelopeFit
        # traces whose steps line up event by event (b=1 can differ: some reshapes of a
        # batch of one are views instead of copies); the group holding the largest b
        top_len = len(self.estimates[max(self.estimates)].window_live)
        aligned = {e.batch_size: e.window_live for e in ests if len(e.window_live) == top_len}
        if top_len and len(aligned) >= 2:
            self.logical = EnvelopeFit(
                aligned,
                max_extrapolation=max_extrapolation,
                what="the logical peak",
            )
        elif all({"passes", "optimizer"} <= e.phase_peaks.keys() for e in ests):
            self.logical = fit_two_phase(
                {e.batch_size: e.phase_peaks["passes"] for e in ests},
                {e.batch_size: e.phase_peaks["optimizer"] for e in ests},
                max_extrapolation=max_extrapolation,
                what="the logical peak",
            )
        else:
            self.logical = fit_piecewise_linear(
                {b: e.peak_logical_bytes for b, e in self.estimates.items()},
                max_extrapolation=max_extrapolation,
                what="the logical peak",
            )
        self.traces = {t.batch_size: t for t in traces if t.batch_size in self.estimates}
        self._replayed: dict[int, int] = {}
        top = self.estimates[max(self.estimates)]
        self.fixed = gpu.cublas_workspace_bytes * gpu.cublas_handles
        self.frag = max(
            0.0,
            (top.peak_reserved_bytes - self.fixed - top.peak_logical_bytes)
            / max(1, top.peak_logical_bytes),
        )
        self._logical_max = _RunningMax(self._logical, self._logical, lambda b: b + 1)
        always = frozenset([*self.estimates, self.max_batch_cap])
        self._reserved_max = _RunningMax(
            self._reserved, self._logical, lambda b: next_replay_point(b, always)
        )

    def for_gpu(self, gpu: GpuSpec) -> FittedMemoryModel:
        """The same traces replayed for ``gpu`` (another GPU type: its CUDA context, cuBLAS
        workspaces and capacity), fitted alike; needs the traces (``traces=``)."""
        traces = [self.traces[b] for b in sorted(self.traces)]
        if len(traces) != len(self.estimates):
            raise ValueError("for_gpu needs the model's traces: build it with traces=")
        return FittedMemoryModel(
            [replay(t, gpu) for t in traces],
            gpu,
            max_extrapolation=self.logical.max_extrapolation,
            traces=traces,
        )

    def predict_logical(self, batch_size: int) -> int:
        """Live tensor bytes at the step's peak (never less than at a smaller batch)."""
        _check_whole("batch_size", batch_size)
        return self._logical_max(batch_size)

    def predict_reserved(self, batch_size: int) -> int:
        """Caching-allocator reserved bytes at the step's peak (never less than at a smaller
        batch).

        With the traces at hand, the allocation sequence at a batch size is synthesised from
        the two largest traced ones (sizes are linear in b event by event) and replayed through
        the allocator model; otherwise the overhead ratio at the largest traced b is used. The
        answer is the largest of those at the replay points up to the first at or above
        ``batch_size`` (:func:`next_replay_point`; every b up to 128).
        """
        _check_whole("batch_size", batch_size)
        return self._reserved_max(batch_size)

    def _logical(self, batch_size: int) -> int:
        """The logical peak at ``batch_size`` alone: traced, else the fit."""
        if batch_size in self.estimates:
            return self.estimates[batch_size].peak_logical_bytes
        return self.logical(batch_size)

    def _reserved(self, batch_size: int) -> int:
        """The reserved peak at ``batch_size`` alone: traced, else replayed or scaled."""
        if batch_size in self.estimates:
            return self.estimates[batch_size].peak_reserved_bytes
        logical = self.logical(batch_size)  # raises where the fit is not trusted
        if batch_size not in self._replayed and len(self.traces) >= 2:
            a, b = sorted(self.traces.values(), key=lambda t: t.batch_size)[-2:]
            syn = synthesize(a, b, batch_size)
            if syn is not None:
                syn.peak_logical_bytes = logical
                self._replayed[batch_size] = replay(syn, self.gpu).peak_reserved_bytes
        if batch_size in self._replayed:
            return self._replayed[batch_size]
        return int(logical * (1 + self.frag)) + self.fixed

    def predict(self, batch_size: int) -> int:
        """Peak bytes per GPU: reserved plus the CUDA context (see ``MemoryModel``).

        Raises :class:`SpecError` unless ``batch_size`` is a whole number (2.5 and ``True``
        were answered as batches, NaN raised a bare ValueError), and
        :class:`ExtrapolationError` below 1 or where the fit is not trusted; so do
        :meth:`predict_logical` and :meth:`predict_reserved`."""
        return self.predict_reserved(batch_size) + self.gpu.context_bytes

    @property
    def max_batch_cap(self) -> int:
        """The largest batch :meth:`max_batch` answers: ``max_extrapolation`` times the largest
        traced b. An answer equal to it means "at least this many" (the search stops there)."""
        return int(max(self.estimates) * self.logical.max_extrapolation)

    def max_batch(self, limit_bytes: int, margin_bytes: int = 0) -> int | None:
        """Largest b such that every batch ``1..b`` has ``predict <= limit_bytes -
        margin_bytes``, within the range the fit supports (at most :attr:`max_batch_cap`; an
        answer equal to it is a lower bound; a batch the fit does not answer ends the range);
        None if b=1 does not fit. Raises :class:`ExtrapolationError` when the fit answers no
        untraced b (not linear in b, or too poor a fit).

        ``predict`` is non-decreasing and constant between two of the reserved peak's replay
        points, so this is the last such point before the first whose prediction is over the
        budget: the search walks the points up from 1 (above 128 the answer is therefore a
        point, at most 1/64 below the exact one), as the running maximum needs each of them
        anyway.

        Raises :class:`SpecError` unless ``limit_bytes`` and ``margin_bytes`` are finite
        numbers >= 0, as :meth:`TransformerMemory.max_batch` does (a NaN budget compared
        false with every prediction and answered the search's cap)."""
        check_finite("limit_bytes", limit_bytes, positive=False, what="a number of bytes")
        check_finite("margin_bytes", margin_bytes, positive=False, what="a number of bytes")
        problem = self.logical.refusal()
        if problem:
            raise ExtrapolationError(f"{problem}; trace the batch sizes to check directly")
        budget = limit_bytes - margin_bytes
        best: int | None = None
        for b in self._reserved_max.points(self.max_batch_cap):
            try:
                if self.predict(b) > budget:
                    break
            except ExtrapolationError:
                break
            best = b
        return best


def _check_whole(field: str, value: Any) -> None:
    """Raise :class:`SpecError` on ``field`` unless ``value`` is an integer (a NumPy one
    too), not a bool: a batch size of a memory model. Its range is the model's to check."""
    if not is_whole_number(value):
        raise SpecError(field, f"must be a whole number of samples, got {quoted(value)}")


GRID_SHARE = 64
"""Above ``2 * GRID_SHARE`` the reserved peak is replayed at batch sizes ``1 / GRID_SHARE``
apart (:func:`next_replay_point`)."""


def next_replay_point(batch_size: int, fixed: frozenset[int] = frozenset()) -> int:
    """The batch size after ``batch_size`` at which :class:`FittedMemoryModel` replays the
    reserved peak: the next integer up to ``2 * GRID_SHARE``, then ``batch_size / GRID_SHARE``
    further on (replays cost ~15 ms each for gpt2_124m, and a search may reach 32x the
    largest traced batch), or the first of ``fixed`` (the traced batches, the search's cap)
    before that."""
    step = batch_size + max(1, batch_size // GRID_SHARE)
    return min([step, *(f for f in fixed if batch_size < f < step)])


class _RunningMax:
    """A non-decreasing M(b) from a per-b ``value`` that need not be: ``M(b)`` is the
    largest ``value`` at the points ``1, after(1), after(after(1)), ...`` up to the first at or
    above ``b`` (points where ``value`` raises :class:`ExtrapolationError` are left out).
    ``check(b)`` raises where ``b`` itself is not answered. The points and their running
    maxima are kept: each point is evaluated once."""

    def __init__(
        self,
        value: Callable[[int], int],
        check: Callable[[int], int],
        after: Callable[[int], int],
    ) -> None:
        self.value, self.check, self.after = value, check, after
        self._points: list[int] = []
        self._maxima: list[int | None] = []  # over the points up to the same index

    def _extend(self) -> None:
        b = self.after(self._points[-1]) if self._points else 1
        try:
            here: int | None = self.value(b)
        except ExtrapolationError:
            here = None
        before = self._maxima[-1] if self._maxima else None
        self._points.append(b)
        self._maxima.append(
            here if before is None else before if here is None else max(before, here)
        )

    def points(self, up_to: int) -> Iterator[int]:
        """The points in order, up to the first at or above ``up_to``."""
        i = 0
        while True:
            if i == len(self._points):
                self._extend()
            yield self._points[i]
            if self._points[i] >= up_to:
                return
            i += 1

    def __call__(self, batch_size: int) -> int:
        """M(``batch_size``); raises where ``check`` does."""
        self.check(batch_size)
        while not self._points or self._points[-1] < batch_size:
            self._extend()
        at = self._maxima[bisect.bisect_left(self._points, batch_size)]
        return self.value(batch_size) if at is None else at


def estimate_memory(
    req: TraceRequest,
    gpu: GpuSpec,
    progress: Progress | None = None,
    workers: WarmTracers | None = None,
    timeout_s: float = 1800.0,
) -> list[MemoryEstimate]:
    """Trace ``req`` (every batch size in one subprocess, taken from ``workers`` when given)
    and replay each trace for ``gpu``."""
    return [replay(t, gpu) for t in trace(req, progress, timeout_s, workers)]


def estimate_memory_on(
    req: TraceRequest,
    gpus: Sequence[GpuSpec],
    workers: WarmTracers | None = None,
    timeout_s: float = 1800.0,
) -> list[list[MemoryEstimate]]:
    """:func:`estimate_memory` for each of ``gpus`` from one trace of ``req``: the estimates
    of every traced batch size, one list per GPU, in the order of ``gpus``."""
    traces = trace(req, None, timeout_s, workers)
    return [[replay(t, gpu) for t in traces] for gpu in gpus]


def fit_memory_model(
    req: TraceRequest,
    gpu: GpuSpec,
    progress: Progress | None = None,
    max_extra_rounds: int = 2,
    workers: WarmTracers | None = None,
    timeout_s: float = 1800.0,
) -> FittedMemoryModel:
    """Trace ``req.batch_sizes`` (e.g. 1, 2, 4) and fit M(b); when every point is dominated by
    the optimizer-step peak, trace larger batches (x4, x8) up to ``max_extra_rounds`` times.
    ``workers``: as for :func:`estimate_memory`."""
    deadline = time.monotonic() + timeout_s
    traces = trace(req, progress, timeout_s, workers)
    estimates = [replay(t, gpu) for t in traces]
    model = FittedMemoryModel(estimates, gpu, traces=traces)
    for _ in range(max_extra_rounds):
        if model.logical.slope_known:
            break
        bmax = max(model.estimates)
        more = TraceRequest(
            **{**req.to_json(), "batch_sizes": (bmax * 4, bmax * 8), "sys_path": req.sys_path}
        )
        extra = trace(more, progress, max(deadline - time.monotonic(), 0.001), workers)
        traces += extra
        estimates += [replay(t, gpu) for t in extra]
        model = FittedMemoryModel(estimates, gpu, traces=traces)
    return model
