"""Submission-time memory estimates: ``gpu_memory: auto`` (a job's peak GPU memory) and an
elastic job's micro-batch limit, predicted before admission.

Runs :func:`danlu.estimate.memory.estimate_memory` (which traces in a subprocess) in a worker
thread with a timeout, OUTSIDE any database transaction. On any failure the job falls back to
whole GPUs and the reason says so.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from danlu.config import DEFAULT_TRACE_MODULES
from danlu.core.cluster import Cluster
from danlu.core.errors import SpecError
from danlu.core.spec import AUTO_FAMILY, JobSpec, TrainingHints
from danlu.core.units import format_bytes
from danlu.core.values import controls_replaced, quoted
from danlu.server.services.admission import canonical_gpu_types

if TYPE_CHECKING:
    from danlu.estimate.memory import TraceRequest
    from danlu.estimate.memory.gpus import GpuSpec
    from danlu.estimate.memory.tracer import WarmTracers

log = logging.getLogger(__name__)
DEFAULT_GPU = "a100-80gb"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Estimate:
    """The resolved bytes per GPU (``None``: whole GPUs) and a note for the pending reason;
    ``family``: the model family the trace recognised (``None``: not traced, or none);
    ``limit_note``: why an elastic job's micro-batch limit, traced apart from its memory
    share, could not be estimated (``None``: it was, or was not tried)."""

    gpu_memory: int | None
    note: str | None = None
    family: str | None = None
    limit_note: str | None = None


def submission_notes(spec: JobSpec, estimate: Estimate) -> list[str]:
    """What a submission of ``spec`` tells in its jobs' pending reason (``POST /jobs`` and
    ``POST /sweeps`` alike): how ``gpu_memory: auto`` was resolved (or why it could not
    be, whole GPUs then), why the micro-batch limit could not be estimated, and the model
    family ``training.family: auto`` was inferred as."""
    notes = [estimate.note] if estimate.note and spec.resources.gpu_memory == "auto" else []
    if estimate.limit_note:
        notes.append(estimate.limit_note)
    if spec.training.family == AUTO_FAMILY:
        notes.append(
            f"model family {estimate.family} inferred from its layers"
            if estimate.family
            else "model family not inferred (no layer it knows, or the trace failed): "
            "the interference model uses its median pair"
        )
    return notes


def _gpu_specs(spec: JobSpec, cluster: Cluster) -> list[GpuSpec]:
    """The GPUs ``spec`` may land on, as the memory model sees them, the one with the least
    usable memory first (the capacity checks plan for it): of the nodes with GPUs of a type
    it accepts, each distinct one (:func:`~danlu.estimate.memory.gpus.gpu_for_memory`: the
    table's entry, its capacity at most the node's GPU memory; a type the table lacks from
    that memory). Without such a node: the table's entry of a type the job names, else the
    default GPU's."""
    from danlu.core.errors import UnknownNameError
    from danlu.estimate.memory.gpus import get_gpu, gpu_for_memory

    # as the scheduler reads them: a model without its size (A100) stands for every size
    wanted = [t.lower() for t in sorted(canonical_gpu_types(spec, cluster, strict=False))]
    found: list[GpuSpec] = []
    for node in cluster.nodes:
        kind = node.gpu_type
        if node.gpus <= 0 or (wanted and kind.name.lower() not in wanted):
            continue
        try:
            gpu = gpu_for_memory(kind.name, kind.memory)
        except UnknownNameError:  # a type the table lacks, of unknown memory
            continue
        if gpu not in found:
            found.append(gpu)
    if found:
        return sorted(found, key=lambda g: (g.capacity_bytes - g.context_bytes, g.capacity_bytes))
    for name in wanted:
        try:
            return [get_gpu(name)]
        except UnknownNameError:
            continue
    return [get_gpu(DEFAULT_GPU)]


def _gpu_spec(spec: JobSpec, cluster: Cluster) -> GpuSpec:
    """The GPU to check ``spec``'s capacity against: of those it may land on
    (:func:`_gpu_specs`), the one with the least usable memory."""
    return _gpu_specs(spec, cluster)[0]


def _data_parallel(spec: JobSpec) -> bool:
    """Whether ``spec`` may run on more than one GPU, where ``danlu.train`` wraps its model
    in DDP (whose gradient buckets the estimate then counts: ``TraceRequest.data_parallel``).
    An elastic job counts from its largest GPU count: its memory share and micro-batch must
    also fit when it grows (traced at the per-GPU batch of its fewest GPUs, the largest:
    :func:`_auto_batch`)."""
    return spec.resources.gpus.max > 1


def untraceable(model_ref: str, modules: Sequence[str]) -> str:
    """Why the server will not import and call the factory ``model_ref`` (``""``: it may):
    only factories within ``modules`` (``DANLU_TRACE_MODULES``) run, since the submitter
    names them. The factory is a name the module defines (no dotted path through what the
    module imported, such as ``zoo:torch.os.fork``), not a private one."""
    module, _, factory = (part.strip() for part in model_ref.partition(":"))
    if not factory.isidentifier() or factory.startswith("_"):
        return (
            f"training.model {quoted(model_ref)}: the server calls only a public name of the "
            "module, as in package.module:factory"
        )
    if any(module == name or module.startswith(name + ".") for name in modules):
        return ""
    return (
        f"training.model {quoted(model_ref)} is not in a package this server traces "
        f"(DANLU_TRACE_MODULES: {', '.join(modules) or 'none'})"
    )


def _trace_request(
    model_ref: str,
    batch_sizes: tuple[int, ...],
    data_parallel: bool,
    hints: TrainingHints | None,
) -> TraceRequest:
    """What to trace of ``model_ref`` at ``batch_sizes``, in the training setup the job's
    ``hints`` name (``training.precision``, ``training.optimizer``,
    ``training.activation_checkpointing``; None: their defaults, fp32, adamw and no
    checkpointing); ``data_parallel``: under DDP."""
    from danlu.estimate.memory import TraceRequest

    setup = TrainingHints() if hints is None else hints
    return TraceRequest(
        model_ref,
        batch_sizes,
        precision=setup.precision,
        optimizer=setup.optimizer,
        checkpointing=setup.activation_checkpointing,
        data_parallel=data_parallel,
    )


def _predict(
    model_ref: str,
    batch_size: int,
    gpus: Sequence[GpuSpec],
    data_parallel: bool = False,
    workers: WarmTracers | None = None,
    timeout: float = 1800.0,
    hints: TrainingHints | None = None,
) -> tuple[int, str | None]:
    """(peak bytes on the GPU, model family) of one trace at ``batch_size``: the largest
    peak over ``gpus`` (the job may land on any; their CUDA contexts and cuBLAS workspaces
    differ), ``data_parallel``: under DDP, its gradient buckets counted; ``hints``: the
    job's training setup (:func:`_trace_request`)."""
    from danlu.estimate.memory.predict import auto_gpu_memory, estimate_memory_on

    req = _trace_request(model_ref, (batch_size,), data_parallel, hints)
    per_gpu = estimate_memory_on(req, gpus, workers, timeout)
    peak = auto_gpu_memory(e for estimates in per_gpu for e in estimates)
    return peak, per_gpu[0][0].family


def _auto_batch(spec: JobSpec) -> int:
    """The per-GPU batch whose peak ``gpu_memory: auto`` predicts: the job's global batch
    split over its GPUs, rounded up, as a launch splits it (``JobLaunch.per_gpu_batch``,
    ``DANLU_BATCH_SIZE``). An elastic job is split over its fewest GPUs, where each runs the
    most, so that its share holds at every count it may run at; :func:`_data_parallel`
    counts DDP's buckets from two GPUs up, an upper bound for ``1..N`` at one GPU.

    The spec names no micro-batch or accumulation: a launch caps the split at the job's
    ``micro_batch_limit``, which an ``auto`` job gets from this batch's peak, never below
    this batch (:func:`_largest_micro_batch`), so the policy's larger batches accumulate
    within the share. Without ``global_batch_size`` (no ``DANLU_BATCH_SIZE`` then) the
    split is of ``min_batch_size``, else 1."""
    hints = spec.training
    batch = hints.global_batch_size or hints.min_batch_size or 1
    return -(-batch // max(1, spec.resources.gpus.min))


_SPEC_FIELDS = {
    "MODEL_REF": "training.model",
    "--precision": "training.precision",
    "--optimizer": "training.optimizer",
    "--checkpointing": "training.activation_checkpointing",
}
"""The job spec's name of a field the tracer names as ``danlu estimate`` does."""


_KEPT = "\n\t"
"""The control characters a failed trace's message keeps in the job's reason (the others
are shown as ``?``: :func:`~danlu.core.values.controls_replaced`)."""


def _in_worker(fn: Callable[..., T], timeout: float, *args: Any) -> tuple[T | None, str]:
    """``fn(*args)`` in a worker thread: (its value, "") or (None, why not)."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="danlu-estimate")
    try:
        future = pool.submit(fn, *args)
        return future.result(timeout=timeout), ""
    except concurrent.futures.TimeoutError:
        return None, f"timed out after {timeout:g}s"
    except SpecError as exc:  # the model reference is the job spec's training.model
        field = _SPEC_FIELDS.get(exc.field, exc.field)
        log.info("memory estimate of %s refused: %s", args[0] if args else fn, exc)
        message = controls_replaced(exc.message, keep=_KEPT)
        return None, f"failed ({field}: {message})" if field else f"failed ({message})"
    except Exception as exc:  # the tracer runs arbitrary user models: any failure falls back
        log.info("memory estimate of %s failed: %s", args[0] if args else fn, exc)
        return None, f"failed ({controls_replaced(str(exc), keep=_KEPT)})"
    finally:
        pool.shutdown(wait=False)


def resolve_gpu_memory(
    spec: JobSpec,
    cluster: Cluster,
    timeout: float,
    workers: WarmTracers | None = None,
    modules: Sequence[str] = DEFAULT_TRACE_MODULES,
) -> Estimate:
    """The per-GPU bytes to admit ``spec`` with: the explicit value, the estimate for
    ``auto`` with a ``training.model``, or whole GPUs (``None``) with a note why.
    ``workers``: trace in one of these (see :class:`WarmTracers`); ``modules``: the
    packages whose factories may be traced (:func:`untraceable`)."""
    skipped = _skipped(spec, modules)
    if skipped is not None:
        return skipped
    return _gpu_memory_estimate(spec, cluster, timeout, workers)[0]


def _skipped(spec: JobSpec, modules: Sequence[str]) -> Estimate | None:
    """The estimate of a job whose ``training.model`` may not be traced (the explicit
    ``gpu_memory``, or whole GPUs with the reason); None when it may be."""
    model = spec.training.model
    why = untraceable(model, modules) if model else ""
    if not why:
        return None
    memory = spec.resources.gpu_memory
    if memory != "auto":
        return Estimate(memory if isinstance(memory, int) and memory > 0 else None)
    return Estimate(None, f"memory estimate skipped ({why}): using whole GPUs")


def _gpu_memory_estimate(
    spec: JobSpec, cluster: Cluster, timeout: float, workers: WarmTracers | None
) -> tuple[Estimate, bool]:
    """:func:`resolve_gpu_memory`, and whether it traced the model (a trace that failed or
    timed out counts: it was tried)."""
    memory = spec.resources.gpu_memory
    if memory != "auto":
        return Estimate(memory if isinstance(memory, int) and memory > 0 else None), False
    model = spec.training.model
    if not model:
        return Estimate(None, "gpu_memory: auto without training.model: using whole GPUs"), False
    traced, why = _trace_auto_batch(spec, model, cluster, timeout, workers)
    if traced is None:
        return Estimate(None, f"memory estimate {why}: using whole GPUs"), True
    value, family = traced
    return Estimate(int(value), _estimated_note(value), family), True


def _estimated_note(peak: float) -> str:
    """The submission's note of a ``gpu_memory: auto`` estimated at ``peak`` bytes per GPU:
    the size as a person reads it, then its exact bytes (``14.2GiB (15246927872 bytes)``)."""
    return f"gpu_memory estimated at {format_bytes(peak)} ({int(peak)} bytes) per GPU"


def _trace_auto_batch(
    spec: JobSpec, model: str, cluster: Cluster, timeout: float, workers: WarmTracers | None
) -> tuple[tuple[int, str | None] | None, str]:
    """:func:`_predict` of ``model`` at the job's ``auto`` batch on its GPU type, in a worker
    thread with ``timeout``: ((peak bytes, family), "") or (None, why not)."""
    return _in_worker(
        _predict,
        timeout,
        model,
        _auto_batch(spec),
        _gpu_specs(spec, cluster),
        _data_parallel(spec),
        workers,
        timeout,
        spec.training,
    )


MICRO_BATCH_TRACES = (2, 8, 32)
"""Batch sizes traced to fit the memory model M(b) for the micro-batch limit (the fit is
trusted up to 32 x the largest)."""


def _largest_micro_batch(
    model_ref: str,
    gpus: Sequence[GpuSpec],
    limit: int | None,
    upper: int,
    auto_batch: int | None = None,
    data_parallel: bool = False,
    workers: WarmTracers | None = None,
    timeout: float = 1800.0,
    hints: TrainingHints | None = None,
) -> tuple[int | None, int | None, str | None]:
    """(the largest safe micro-batch, the peak at ``auto_batch``, the model family): one
    trace subprocess, replayed for each of ``gpus`` (the job may land on any:
    :func:`_gpu_specs`). The micro-batch is the smallest of their answers, each with 5 %
    of its budget spare: ``limit``, never more than that GPU's capacity (the node's GPU
    memory); ``data_parallel``: DDP's gradient buckets counted; ``hints``: the job's
    training setup (:func:`_trace_request`).

    With ``auto_batch`` (``gpu_memory: auto``) that batch is traced too: its largest peak
    over ``gpus`` is the job's memory share, which is then the budget (``limit`` is
    ignored). The micro-batch is never below ``auto_batch``: the share was sized for it,
    exactly (a traced batch), and a launch caps the per-GPU split at the micro-batch, so a
    smaller one would never run the batch the job is charged for."""
    from danlu.estimate.memory import fit_memory_model
    from danlu.estimate.memory.predict import auto_gpu_memory
    from danlu.estimate.optimize import largest_safe_batch

    sizes = tuple(sorted({*MICRO_BATCH_TRACES, *([auto_batch] if auto_batch else [])}))
    first = fit_memory_model(
        _trace_request(model_ref, sizes, data_parallel, hints),
        gpus[0],
        workers=workers,
        timeout_s=timeout,
    )
    fitted = [first, *(first.for_gpu(gpu) for gpu in gpus[1:])]
    peak = None
    if auto_batch:  # traced: exact, as resolve_gpu_memory's own trace would give it
        peak = auto_gpu_memory(f.estimates[auto_batch] for f in fitted)
        limit = peak
    micro: int | None
    try:
        answers = [
            largest_safe_batch(
                f,
                f.gpu.capacity_bytes if limit is None else min(limit, f.gpu.capacity_bytes),
                upper,
            )
            for f in fitted
        ]
        micro = None if None in answers else min(a for a in answers if a is not None)
    except Exception as exc:  # the peak still stands without a micro-batch limit
        log.info("micro-batch limit of %s failed: %s", model_ref, exc)
        micro = None
    if auto_batch:
        micro = max(micro or 0, auto_batch)  # at most upper: the global batch holds it
    return micro, peak, first.estimates[max(first.estimates)].family


def _micro_limit_inputs(spec: JobSpec) -> tuple[str, int] | None:
    """(model reference, largest batch) of a job that gets a micro-batch limit: an elastic
    job with a global batch and a ``training.model``; None for any other."""
    hints = spec.training
    batch, model = hints.global_batch_size, hints.model
    if not spec.resources.gpus.elastic or batch is None or not model:
        return None
    return model, max(hints.max_batch_size or batch, batch)


def _traced_micro_batch(
    spec: JobSpec,
    cluster: Cluster,
    timeout: float,
    inputs: tuple[str, int],
    limit: int | None,
    workers: WarmTracers | None,
    *,
    auto: bool = False,
) -> tuple[tuple[int | None, int | None, str | None] | None, str]:
    """:func:`_largest_micro_batch` of the job's model (``inputs``: its reference and largest
    batch) in a worker thread with ``timeout``; ``auto``: trace the ``gpu_memory: auto``
    batch too. (its value, "") or (None, why not)."""
    model, upper = inputs
    auto_batch = _auto_batch(spec) if auto else None
    return _in_worker(
        _largest_micro_batch,
        timeout,
        model,
        _gpu_specs(spec, cluster),
        limit,
        upper,
        auto_batch,
        _data_parallel(spec),
        workers,
        timeout,
        spec.training,
    )


def resolve_memory(
    spec: JobSpec,
    cluster: Cluster,
    timeout: float,
    workers: WarmTracers | None = None,
    modules: Sequence[str] = DEFAULT_TRACE_MODULES,
) -> tuple[Estimate, int | None]:
    """:func:`resolve_gpu_memory` and :func:`resolve_micro_batch_limit` together: a job that
    needs both (``gpu_memory: auto`` and an elastic global batch) has its model traced once,
    at the micro-batch sizes and its batch in one subprocess, instead of twice. The
    estimate's ``family`` is what those traces recognised; with ``training.family: auto``
    and no trace needed otherwise, the model is traced once at its ``auto`` batch for it.
    ``workers``: trace in one of these (see :class:`WarmTracers`); ``modules``: the
    packages whose factories may be traced (:func:`untraceable`)."""
    skipped = _skipped(spec, modules)
    if skipped is not None:
        return skipped, None
    inputs = _micro_limit_inputs(spec)
    if spec.resources.gpu_memory != "auto" or inputs is None:
        estimate, traced = _gpu_memory_estimate(spec, cluster, timeout, workers)
        limit, family, limit_traced, why = _micro_batch_limit(
            spec, cluster, timeout, estimate.gpu_memory, workers
        )
        if estimate.family is None and family is not None:
            estimate = replace(estimate, family=family)
        if why:  # else the job's micro-batch went unbounded without a word
            note = f"micro-batch limit estimate {why}: none set (danlu.train's OOM guard finds it)"
            estimate = replace(estimate, limit_note=note)
        traced = traced or limit_traced
    else:
        both, why = _traced_micro_batch(spec, cluster, timeout, inputs, None, workers, auto=True)
        micro, peak, family = both if both is not None else (None, None, None)
        traced = True
        limit = int(micro) if micro is not None and micro >= 1 else None
        if peak is None:
            estimate = Estimate(None, f"memory estimate {why or 'failed'}: using whole GPUs")
            limit = None
        else:
            estimate = Estimate(int(peak), _estimated_note(peak), family)
    model = spec.training.model
    if spec.training.family == AUTO_FAMILY and not traced and model:
        found, _ = _trace_auto_batch(spec, model, cluster, timeout, workers)
        if found is not None:
            estimate = replace(estimate, family=found[1])
    return estimate, limit


def resolve_micro_batch_limit(
    spec: JobSpec,
    cluster: Cluster,
    timeout: float,
    gpu_memory: int | None = None,
    workers: WarmTracers | None = None,
    modules: Sequence[str] = DEFAULT_TRACE_MODULES,
) -> int | None:
    """The largest per-GPU micro-batch of an elastic job with a global batch and a
    ``training.model`` that its memory model predicts to fit, with 5 % spare, in
    ``gpu_memory`` bytes (its memory share) or else the whole GPU, on every GPU type it may
    land on (:func:`_gpu_specs`); at most the job's largest batch. None for other jobs, and
    when the estimate fails or times out (then ``danlu.train``'s OOM guard finds the
    micro-batch), or the model may not be traced (``modules``)."""
    if _skipped(spec, modules) is not None:
        return None
    return _micro_batch_limit(spec, cluster, timeout, gpu_memory, workers)[0]


def _micro_batch_limit(
    spec: JobSpec,
    cluster: Cluster,
    timeout: float,
    gpu_memory: int | None,
    workers: WarmTracers | None,
) -> tuple[int | None, str | None, bool, str]:
    """:func:`resolve_micro_batch_limit`, with the model family its trace recognised,
    whether it traced at all, and why the trace gave nothing (``""``: it did, or none ran)."""
    inputs = _micro_limit_inputs(spec)
    if inputs is None:
        return None, None, False, ""
    both, why = _traced_micro_batch(spec, cluster, timeout, inputs, gpu_memory, workers)
    if both is None:
        return None, None, True, why
    value, _, family = both
    return (int(value) if value is not None and value >= 1 else None), family, True, ""
