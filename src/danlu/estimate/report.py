"""A training step's GPU memory in one call: :func:`estimate_memory`, what ``danlu estimate``
prints (its ``--json`` object is :meth:`MemoryReport.to_json`; the command renders the same
report as a table).

The step is traced in a subprocess (:func:`danlu.estimate.memory.trace`) and replayed for
one GPU type; ``sweep`` and ``max_batch`` fit M(b) from the traced batch sizes, as
``--sweep`` and ``--max-batch`` do. Each keyword argument is the command's flag of the same
name (``gpu_memory`` is ``--gpu-memory``); a :class:`~danlu.core.errors.SpecError` names the
argument (:data:`PARAMETER_FLAGS`). No torch is imported here.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from danlu.core.errors import SpecError, UnknownNameError
from danlu.core.spec import MAX_BATCH
from danlu.core.spec_training import precision_name
from danlu.core.units import format_bytes, parse_bytes
from danlu.core.values import is_whole_number, quoted, range_message

if TYPE_CHECKING:
    from danlu.estimate.memory import FittedMemoryModel, GpuSpec, MemoryEstimate, StepTrace
    from danlu.estimate.memory.tracer import Progress

DEFAULT_FIT_POINTS: tuple[int, ...] = (1, 2, 4)
"""The batch sizes traced to fit M(b) when ``fit_points`` is not given."""
LONE_SAMPLE_FIT_POINTS: tuple[int, ...] = (2, 4, 8)
"""The fit points traced in place of the default's when the model cannot train on a batch of
one sample (batch normalisation in training): the default's next points."""
LONE_SAMPLE_ROW = "the model cannot train on a batch of 1 sample (batch normalisation)"
"""The sweep row of batch 1 for such a model: the fit from 2 on would answer it."""
DEFAULT_MARGIN = "5%"
"""The safety margin ``max_batch`` keeps when ``margin`` is not given."""

PARAMETER_FLAGS: dict[str, str] = {
    "model": "MODEL_REF",
    "batch_size": "--batch-size",
    "precision": "--precision",
    "optimizer": "--optimizer",
    "gpu": "--gpu",
    "checkpointing": "--checkpointing",
    "accumulation": "--accumulation",
    "data_parallel": "--data-parallel",
    "gpu_memory": "--gpu-memory",
    "sweep": "--sweep",
    "max_batch": "--max-batch",
    "margin": "--margin",
    "fit_points": "--fit-points",
    "gpu_table": "--gpu-table",
    "target": "--target",
}
"""Each argument of :func:`estimate_memory` and the ``danlu estimate`` flag it stands for:
the field a :class:`SpecError` names is the argument's when :func:`estimate_memory` raises
it, the flag's when the command reports it (:func:`named_for`)."""


@dataclass(frozen=True)
class SweepRow:
    """One batch size of a sweep: its predicted peaks (bytes) and whether the peak on the
    GPU fits the limit, or ``error``: why the fit does not answer it."""

    batch_size: int
    peak_logical_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    peak_device_bytes: int | None = None
    fits: bool | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as ``danlu estimate --json`` gives it: the batch size and either the peaks
        and ``fits`` or the ``error``."""
        if self.error is not None:
            return {"batch_size": self.batch_size, "error": self.error}
        return {
            "batch_size": self.batch_size,
            "peak_logical_bytes": self.peak_logical_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "peak_device_bytes": self.peak_device_bytes,
            "fits": self.fits,
        }


@dataclass(frozen=True)
class MaxBatchAnswer:
    """The largest batch whose every smaller batch fits ``limit_bytes - margin_bytes``.

    ``batch_size`` None: not even the smallest fits (``needs_batch_size`` needs
    ``needs_bytes`` on the GPU), or the fit answers no untraced batch (``error``).
    ``capped``: the search stopped at 32x the largest traced batch, so the answer is a lower
    bound. ``lone_sample``: the model cannot train on a batch of one sample."""

    batch_size: int | None
    capped: bool
    limit_bytes: int
    margin_bytes: int
    context_bytes: int
    needs_batch_size: int | None = None
    needs_bytes: int | None = None
    error: str | None = None
    lone_sample: bool = False

    def to_json(self) -> dict[str, Any]:
        """The ``max_batch*`` fields of ``danlu estimate --json``, in its order."""
        out: dict[str, Any] = {} if self.error is None else {"max_batch_error": self.error}
        out.update(
            max_batch=self.batch_size,
            max_batch_capped=self.capped,
            gpu_memory_bytes=self.limit_bytes,
            margin_bytes=self.margin_bytes,
        )
        if self.batch_size is None and self.error is None:
            out["max_batch_needs_batch_size"] = self.needs_batch_size
            out["max_batch_needs_bytes"] = self.needs_bytes
        return out

    def in_words(self) -> str:
        """The answer as ``danlu estimate --max-batch`` prints it."""
        if self.error is not None:
            return f"not known: {self.error}"
        if not self.batch_size:
            why = " (it cannot train on a batch of 1 sample)" if self.lone_sample else ""
            return (
                f"none: it does not fit even at batch {self.needs_batch_size}{why}, which "
                f"needs {format_bytes(self.needs_bytes or 0)} on the GPU (the CUDA context's "
                f"{format_bytes(self.context_bytes)} included), over the "
                f"{format_bytes(self.limit_bytes - self.margin_bytes)} the limit leaves "
                "after the margin; give a larger --gpu-memory or --gpu, or a smaller model "
                "or --precision"
            )
        if self.capped:
            from danlu.estimate.memory.fit import DEFAULT_MAX_EXTRAPOLATION

            return (
                f"at least {self.batch_size} (the search stops at "
                f"{DEFAULT_MAX_EXTRAPOLATION:g}x the largest traced batch; trace larger "
                "--fit-points)"
            )
        return str(self.batch_size)


@dataclass
class MemoryReport:
    """What ``danlu estimate`` prints: the step's estimate at one batch size on one GPU, the
    limit every verdict is judged against, and the sweep and largest batch when asked for.

    ``estimate`` is at ``batch_size`` (else the largest traced batch); its ``capacity_bytes``
    and ``fits`` are the limit's, ``gpu.capacity_bytes`` the GPU's own. ``limit_source`` is
    ``"--gpu-memory"`` (a share of one GPU) or ``"capacity"``. ``traced_batch_sizes`` are the
    batch sizes traced (the fit points and ``batch_size``); ``fit`` is M(b) fitted from them
    (None without a sweep or ``max_batch``). ``notes`` are the command's ``note:`` lines,
    ``estimate.warnings`` its warnings."""

    model_ref: str
    gpu: GpuSpec
    precision: str
    optimizer: str
    checkpointing: bool
    accumulation: int
    target: str
    data_parallel: bool
    estimate: MemoryEstimate
    limit_bytes: int
    limit_source: str
    trace_seconds: float
    traced_batch_sizes: list[int]
    fit: FittedMemoryModel | None = None
    sweep: list[SweepRow] = field(default_factory=list)
    max_batch: MaxBatchAnswer | None = None
    fit_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    lone_sample: bool = False

    @property
    def fits(self) -> bool:
        """Whether the step's peak on the GPU fits the limit."""
        return self.estimate.fits

    @property
    def submit_gpu_memory_bytes(self) -> int:
        """The ``resources.gpu_memory`` to submit for a job running ``estimate.batch_size``
        per GPU with this setup on this GPU: what ``gpu_memory: auto`` charges for it
        (:func:`~danlu.estimate.memory.predict.auto_gpu_memory`, the control plane's own
        rule: the step's peak on the GPU, no headroom added)."""
        from danlu.estimate.memory.predict import auto_gpu_memory

        return auto_gpu_memory([self.estimate])

    def submit_in_words(self) -> str:
        """The ``gpu_memory`` to submit, as ``danlu estimate`` prints it."""
        size = self.submit_gpu_memory_bytes
        words = (
            f"gpu_memory to submit for b={self.estimate.batch_size} per GPU on "
            f"{self.gpu.name}: {size} ({format_bytes(size)}), the step's peak on the GPU, "
            "as gpu_memory: auto charges it (no headroom added)"
        )
        if size > self.gpu.capacity_bytes:
            words += f"; more than the {self.gpu.name}'s capacity: no share of one holds it"
        if not self.data_parallel:
            words += "; for a job on more than one GPU, estimate with --data-parallel"
        return words

    def to_json(self) -> dict[str, Any]:
        """The object ``danlu estimate --json`` prints (all sizes in bytes)."""
        out: dict[str, Any] = {
            "model_ref": self.model_ref,
            "gpu": self.gpu.name,
            "precision": self.precision,
            "optimizer": self.optimizer,
            "checkpointing": self.checkpointing,
            "accumulation": self.accumulation,
            "target": self.target,
            "data_parallel": self.data_parallel,
            **self.estimate.to_json(),
            "capacity_bytes": self.gpu.capacity_bytes,
            "limit_bytes": self.limit_bytes,
            "limit_source": self.limit_source,
            "trace_seconds": round(self.trace_seconds, 3),
            "submit_gpu_memory_bytes": self.submit_gpu_memory_bytes,
        }
        if self.fit is not None:
            out["fit"] = {
                "points": list(self.traced_batch_sizes),
                "c_step": int(self.fit.logical.c_step),
                "c0": int(self.fit.logical.c0),
                "slope": int(self.fit.logical.slope),
                "residual": self.fit.logical.residual,
                "allocator_overhead": self.fit.frag,
            }
        if self.sweep:
            out["sweep"] = [row.to_json() for row in self.sweep]
        if self.max_batch is not None:
            out.update(self.max_batch.to_json())
        if self.fit_seconds is not None:
            out["fit_seconds"] = round(self.fit_seconds, 4)
        return out


def estimate_memory(
    model: str | Callable[[], Any],
    batch_size: int | None = None,
    *,
    precision: str = "fp32",
    optimizer: str = "adamw",
    gpu: str | GpuSpec = "h100",
    checkpointing: bool = False,
    accumulation: int = 1,
    data_parallel: bool = False,
    gpu_memory: int | str | None = None,
    sweep: Sequence[int] | None = None,
    max_batch: bool = False,
    margin: int | str | None = None,
    fit_points: Sequence[int] | None = None,
    gpu_table: str | Path | None = None,
    target: str = "cuda",
    timeout_s: float = 1800.0,
    progress: Progress | None = None,
    on_note: Callable[[str], None] | None = None,
) -> MemoryReport:
    """Trace one training step of ``model`` and predict its peak GPU memory, as
    ``danlu estimate`` does (the command calls this).

    ``model`` is a factory returning ``(model, make_batch, loss_fn)``: its reference
    ``"package.module:factory"``, or the function itself, defined at the top level of an
    importable module (the tracer imports it in a subprocess; one defined in ``__main__``, a
    script or a notebook, cannot be). ``batch_size`` is the per-GPU micro-batch to trace;
    ``precision`` (``fp32``, ``fp16``, ``bf16``), ``optimizer``, ``checkpointing``,
    ``accumulation`` and ``data_parallel`` name the training setup; ``gpu`` a GPU type of the
    table (or a :class:`~danlu.estimate.memory.GpuSpec`), ``gpu_table`` a JSON file adding to
    it. Every verdict is judged against ``gpu_memory`` (bytes, or a size such as
    ``"24GiB"``; capped at the GPU's capacity, with a note), else the GPU's capacity.

    ``sweep``: batch sizes to predict from M(b), fitted from ``fit_points`` (default
    :data:`DEFAULT_FIT_POINTS`; :data:`LONE_SAMPLE_FIT_POINTS` for a model that cannot train
    on one sample) and ``batch_size``; ``max_batch``: also find the largest batch that fits
    with ``margin`` kept free (a size, or a share such as ``"5%"``, the default). Given
    without ``max_batch``, ``margin`` is refused, as ``fit_points`` is without either: they
    would change nothing.

    ``progress(done, total, batch_size)`` is called while tracing, ``on_note(text)`` with
    each note as it arises (they are in :attr:`MemoryReport.notes` too). Raises
    :class:`~danlu.core.errors.SpecError` naming the argument (``batch_size: ...``) for bad
    input, :class:`~danlu.core.errors.DataError` when the traced program fails or times out
    after ``timeout_s``."""
    try:
        return _report(
            model,
            batch_size,
            precision=precision,
            optimizer=optimizer,
            gpu=gpu,
            checkpointing=checkpointing,
            accumulation=accumulation,
            data_parallel=data_parallel,
            gpu_memory=gpu_memory,
            sweep=sweep,
            max_batch=max_batch,
            margin=margin,
            fit_points=fit_points,
            gpu_table=gpu_table,
            target=target,
            timeout_s=timeout_s,
            progress=progress,
            on_note=on_note,
        )
    except SpecError as exc:
        arguments = {flag: name for name, flag in PARAMETER_FLAGS.items()}
        raise named_for(exc, arguments) from None


def named_for(exc: SpecError, names: Mapping[str, str]) -> SpecError:
    """``exc`` (of its own class: a :class:`~danlu.estimate.memory.LoneSampleError` stays
    one) with its field renamed by ``names``, its message the same: the field of an
    :func:`estimate_memory` argument as the command's flag (``PARAMETER_FLAGS``) or back.
    ``exc`` itself when ``names`` does not name its field."""
    if exc.field not in names:
        return exc
    renamed = type(exc).__new__(type(exc))
    SpecError.__init__(renamed, names[exc.field], exc.message)
    return renamed


def model_reference(model: str | Callable[[], Any]) -> str:
    """``model`` as the ``package.module:factory`` reference the tracer imports: a string as
    it is; a function by its module and name, which must find it again (a function defined
    inside another, a lambda, or anything else is refused, saying what to pass)."""
    if isinstance(model, str):
        return model
    module = getattr(model, "__module__", None)
    name = getattr(model, "__qualname__", None)
    if not callable(model) or not isinstance(module, str) or not isinstance(name, str):
        raise SpecError(
            "MODEL_REF",
            f"got a {type(model).__name__}: give the factory that builds the model, as a "
            "function or "
            "as 'package.module:factory' (the tracer builds the model itself, in a "
            "subprocess, on fake tensors: a model object cannot be traced)",
        )
    if not name.isidentifier():  # outer.<locals>.make, <lambda>, Class.method
        raise SpecError(
            "MODEL_REF",
            f"{module}.{name} is not a name its module defines at the top level (the "
            "tracer imports the factory by name in a subprocess): define it at a module's "
            "top level, or give 'package.module:factory'",
        )
    return f"{module}:{name}"


def _import_root(model_ref: str) -> str | None:
    """The directory to import ``model_ref``'s module from, when this process has imported
    it from a file (a notebook's ``sys.path.append``, which the tracer's subprocess does
    not inherit); None otherwise."""
    module_name = model_ref.partition(":")[0]
    module = sys.modules.get(module_name)
    where = getattr(module, "__file__", None)
    if not where or module_name == "__main__":
        return None
    root = Path(where).resolve().parent
    depth = module_name.count(".") + (Path(where).stem == "__init__")
    for _ in range(depth):
        root = root.parent
    return str(root)


def batch_size_within(value: int, flag: str) -> int:
    """``value`` when it is a batch size the tracer takes (a whole number within
    ``1..MAX_BATCH``, a job spec's limit), else a :class:`SpecError` naming ``flag``."""
    if not is_whole_number(value):
        raise SpecError(flag, f"batch sizes must be whole numbers, got {quoted(value)}")
    if not 1 <= value <= MAX_BATCH:
        raise SpecError(flag, f"batch size {range_message(1, MAX_BATCH, value)}")
    return int(value)


COMMON_GPU_GIB = frozenset({8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 141, 192})
"""GPU memory sizes as GPUs are sold, in GiB: a ``gpu_memory`` of one of them in decimal
gigabytes (``80G``) gets a note (:func:`decimal_gpu_size_note`)."""
_DECIMAL_GIGABYTES = re.compile(r"^\s*([0-9]+)\s*(?:g|gb)\s*$", re.IGNORECASE)


def decimal_gpu_size_note(gpu_memory: str) -> str | None:
    """A note when ``gpu_memory`` is a common GPU size (:data:`COMMON_GPU_GIB`) written in
    decimal gigabytes: ``80G`` is 80e9 bytes, 74.5 GiB, where an 80 GiB GPU was surely
    meant; judged against it, batches that fit such a GPU were answered "does NOT fit". Not
    an error: the size is what was written. None for any other size."""
    match = _DECIMAL_GIGABYTES.match(gpu_memory)
    if match is None or int(match.group(1)) not in COMMON_GPU_GIB:
        return None
    n = int(match.group(1))
    article = "an" if str(n).startswith("8") or n == 11 else "a"  # an 80, an 8, an 11
    return (
        f"--gpu-memory {gpu_memory.strip()} is {n}e9 bytes ({format_bytes(n * 1000**3)}); "
        f"write {n}GiB for {article} {n} GiB GPU"
    )


def margin_bytes_of(margin: int | str, limit: int) -> int:
    """``margin`` as bytes: a size (``2GiB``, a number of bytes) or a percentage of
    ``limit`` (``5%``)."""
    text = margin.strip() if isinstance(margin, str) else margin
    if isinstance(text, str) and text.endswith("%"):
        try:
            share = float(text[:-1])
        except ValueError:
            share = float("nan")
        if not math.isfinite(share):
            raise SpecError("--margin", f"{margin!r} is not a percentage; write e.g. 5%")
        if not 0.0 <= share < 100.0:  # "100%" was refused as "not a percentage"
            raise SpecError(
                "--margin",
                f"{margin!r} is no share of the limit to keep free: write one from 0% up to "
                "below 100%, e.g. 5%",
            )
        return int(limit * share / 100.0)
    return parse_bytes(text, "--margin")


def _check_enabled(margin: object, fit_points: object, sweep: object, max_batch: bool) -> None:
    """Refuse ``margin`` without ``max_batch`` and ``fit_points`` without ``sweep`` or
    ``max_batch``: neither changed anything then, yet the output looked as if it had
    (``--sweep 8,16 --margin 10%`` judged every row against the whole limit, no margin
    kept)."""
    if margin is not None and not max_batch:
        raise SpecError(
            "--margin",
            "the safety margin is kept by --max-batch only and changes nothing without it "
            "(--sweep and the verdicts are judged against the whole limit): add "
            "--max-batch, or leave --margin out (a smaller --gpu-memory keeps a margin "
            "everywhere)",
        )
    if fit_points is not None and not (sweep is not None or max_batch):
        raise SpecError(
            "--fit-points",
            "the batch sizes traced to fit M(b) serve --sweep and --max-batch only and "
            "change nothing without them: add --sweep 1,2,4,8 or --max-batch, or leave "
            "--fit-points out",
        )


def _gpu_spec(gpu: str | GpuSpec, gpu_table: str | Path | None) -> GpuSpec:
    """The GPU ``gpu`` names in the table (``gpu_table`` added), or ``gpu`` itself."""
    from danlu.estimate.memory import GpuSpec, get_gpu, load_gpu_table

    if isinstance(gpu, GpuSpec):
        return gpu
    gpus = load_gpu_table(gpu_table)
    try:
        return get_gpu(gpu, gpus)
    except UnknownNameError as exc:  # the fix for a GPU the table lacks was not told
        raise SpecError(
            "--gpu",
            f"unknown GPU type {gpu!r}: use one of {', '.join(exc.valid)}, or describe "
            "it in a JSON file given as --gpu-table (docs/estimate-memory.md, GPU table)",
        ) from None


def _report(
    model: str | Callable[[], Any],
    batch_size: int | None,
    *,
    precision: str,
    optimizer: str,
    gpu: str | GpuSpec,
    checkpointing: bool,
    accumulation: int,
    data_parallel: bool,
    gpu_memory: int | str | None,
    sweep: Sequence[int] | None,
    max_batch: bool,
    margin: int | str | None,
    fit_points: Sequence[int] | None,
    gpu_table: str | Path | None,
    target: str,
    timeout_s: float,
    progress: Progress | None,
    on_note: Callable[[str], None] | None,
) -> MemoryReport:
    """:func:`estimate_memory`, its errors naming the command's flags."""
    from danlu.estimate import memory

    _check_enabled(margin, fit_points, sweep, max_batch)
    model_ref = model_reference(model)
    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        if on_note is not None:
            on_note(text)

    spec = _gpu_spec(gpu, gpu_table)
    sweep_sizes = [batch_size_within(b, "--sweep") for b in sweep] if sweep is not None else []
    need_fit = sweep is not None or max_batch
    if sweep is not None and not sweep_sizes:
        raise SpecError("--sweep", "give the batch sizes to predict, e.g. 1,2,4,8")
    points = [batch_size_within(b, "--fit-points") for b in (fit_points or DEFAULT_FIT_POINTS)]
    if not need_fit:
        points = []
    if batch_size is None and not need_fit:
        raise SpecError(
            "--batch-size",
            "give a batch size (e.g. --batch-size 32), or --sweep 1,2,4,8 or --max-batch",
        )
    if batch_size is not None:
        batch_size = batch_size_within(batch_size, "--batch-size")
    if need_fit and len(set(points)) < 2:
        raise SpecError("--fit-points", "fitting M(b) needs at least two batch sizes, e.g. 1,2,4")
    if gpu_memory is not None:
        limit = parse_bytes(gpu_memory, "--gpu-memory")
        if limit <= 0:
            raise SpecError("--gpu-memory", f"{gpu_memory!r} is no memory; write e.g. 80GiB")
        decimal_note = decimal_gpu_size_note(gpu_memory) if isinstance(gpu_memory, str) else None
        if decimal_note:
            note(decimal_note)
    else:
        limit = spec.capacity_bytes
    limit_source = "--gpu-memory" if gpu_memory is not None else "capacity"
    if limit > spec.capacity_bytes:  # a share of one GPU: capped, as the server caps a share
        note(
            f"--gpu-memory {gpu_memory} ({format_bytes(limit)}) is more than the "
            f"{spec.name}'s capacity of {format_bytes(spec.capacity_bytes)}: judged against "
            "the capacity (the limit is a share of one GPU; choose a larger --gpu for more)"
        )
        limit, limit_source = spec.capacity_bytes, "capacity"
    judged = replace(spec, capacity_bytes=limit)  # the GPU the verdicts are for
    margin_bytes = margin_bytes_of(DEFAULT_MARGIN if margin is None else margin, limit)
    if margin_bytes >= limit:
        raise SpecError(
            "--margin",
            f"{margin!r} leaves nothing of the {format_bytes(limit)} ({limit_source}) limit; "
            "write a smaller size or a share such as 5%",
        )
    sizes = sorted(set(points) | ({batch_size} if batch_size else set()))
    root = None if isinstance(model, str) else _import_root(model_ref)
    sys_path = (root, os.getcwd()) if root else ()
    done_before = 0  # batch sizes traced by earlier requests, for ``progress``

    def traced(sizes: list[int]) -> list[StepTrace]:
        """The traces of ``sizes``, reporting ``progress`` over every request."""
        nonlocal done_before
        req = memory.TraceRequest(
            model_ref,
            tuple(sizes),
            precision=precision,  # type: ignore[arg-type]
            optimizer=optimizer,
            checkpointing=checkpointing,
            accumulation=accumulation,
            target=target,  # type: ignore[arg-type]
            sys_path=sys_path,
            data_parallel=data_parallel,
        )
        before = done_before

        def step(done: int, total: int, b: int) -> None:
            if progress is not None:
                progress(before + done, before + total, b)

        out = memory.trace(req, step, timeout_s)
        done_before += len(sizes)
        return out

    t0 = time.perf_counter()
    alone = _LoneSample(sizes, traced)
    try:
        traces = traced(sizes)
    except memory.LoneSampleError:
        # the default points start at one sample, which a model with batch normalisation
        # cannot train on: the user, who chose no points, is told and served from 2 on
        if not (need_fit and fit_points is None and batch_size != 1):
            raise
        points = list(LONE_SAMPLE_FIT_POINTS)
        sizes = sorted(set(points) | ({batch_size} if batch_size else set()))
        alone = _LoneSample(sizes, traced, known=True)
        default = ",".join(map(str, DEFAULT_FIT_POINTS))
        note(
            f"{model_ref} cannot train on a batch of 1 sample (batch normalisation): M(b) "
            f"fitted from --fit-points {','.join(map(str, points))} in place of the "
            f"default {default}"
        )
        traces = traced(sizes)
    source = "--gpu-memory" if limit_source == "--gpu-memory" else None
    estimates = {t.batch_size: memory.replay(t, judged, source) for t in traces}
    report = MemoryReport(
        model_ref=model_ref,
        gpu=spec,
        # as the trace read them (``--precision BF16`` is bf16, ``16`` fp16; ``--optimizer
        # Adagrad`` adagrad), as the GPU's name is: the JSON echoed the spelling given
        precision=precision_name(precision),
        optimizer=optimizer.lower(),
        checkpointing=checkpointing,
        accumulation=accumulation,
        target=target,
        data_parallel=data_parallel,
        estimate=estimates[batch_size] if batch_size else estimates[max(estimates)],
        limit_bytes=limit,
        limit_source=limit_source,
        trace_seconds=time.perf_counter() - t0,
        traced_batch_sizes=sizes,
        notes=notes,
    )
    if need_fit:
        t1 = time.perf_counter()
        # every traced batch, batch_size's too: exact there, and the range the fit answers
        # (the sweep's refusals, the largest batch's search) reaches from the largest of them
        fit = memory.FittedMemoryModel([estimates[b] for b in sizes], judged, traces=traces)
        report.fit = fit
        report.sweep = [_sweep_row(fit, b, limit, alone) for b in sweep_sizes]
        if max_batch:
            report.max_batch = _max_batch(fit, limit, margin_bytes, alone)
        report.fit_seconds = time.perf_counter() - t1
    report.lone_sample = alone.known
    if report.max_batch is not None:  # (told by the sweep's rows too)
        report.max_batch = replace(report.max_batch, lone_sample=alone.known)
    return report


class _LoneSample:
    """Whether the model cannot train on a batch of one sample (batch normalisation in
    training): ``known`` when the fit was traced from 2 on for it, else told by tracing
    batch 1 once when a sweep's row or the largest batch is 1 (:meth:`refuses`)."""

    def __init__(
        self,
        sizes: list[int],
        traced: Callable[[list[int]], list[StepTrace]],
        known: bool = False,
    ) -> None:
        self.sizes, self.traced, self.known = sizes, traced, known
        self.checked = False  # batch 1 traced (after the fit) to check it trains

    def refuses(self, b: int) -> bool:
        """Whether ``b`` is a batch of one sample that the model cannot train on. A batch
        below every traced one is the fit's figure alone: it "fitted" where the step
        fails."""
        from danlu.estimate.memory import LoneSampleError

        if b != 1 or 1 in self.sizes:  # (batch 1 traced: it trains)
            return False
        if not (self.known or self.checked):
            self.checked = True
            try:
                self.traced([1])
            except LoneSampleError:
                self.known = True
        return self.known


def _sweep_row(fit: FittedMemoryModel, b: int, limit: int, alone: _LoneSample) -> SweepRow:
    """The sweep's row of batch ``b``, judged against ``limit``."""
    from danlu.estimate.memory import ExtrapolationError

    if alone.refuses(b):  # the fit would answer it; the step itself fails
        return SweepRow(b, error=LONE_SAMPLE_ROW)
    try:
        return SweepRow(
            b,
            peak_logical_bytes=fit.predict_logical(b),
            peak_reserved_bytes=fit.predict_reserved(b),
            peak_device_bytes=fit.predict(b),
            fits=fit.predict(b) <= limit,
        )
    except ExtrapolationError as exc:
        return SweepRow(b, error=str(exc))


def _max_batch(
    fit: FittedMemoryModel,
    limit: int,
    margin_bytes: int,
    alone: _LoneSample,
) -> MaxBatchAnswer:
    """The largest batch ``fit`` answers within ``limit`` less ``margin_bytes``."""
    from danlu.estimate.memory import ExtrapolationError

    context = fit.gpu.context_bytes
    try:
        mb = fit.max_batch(limit, margin_bytes)
    except ExtrapolationError as exc:
        return MaxBatchAnswer(None, False, limit, margin_bytes, context, error=str(exc))
    if mb is not None and alone.refuses(mb):
        # an answer below every traced batch is the fit's alone: batch 1 of a model that
        # cannot train on one sample "fitted" (traced from 2 on); the smallest traced batch
        # is what it needs
        mb = None
    if mb is not None:  # the search stops at the cap: an answer there is a lower bound
        return MaxBatchAnswer(mb, mb >= fit.max_batch_cap, limit, margin_bytes, context)
    # "none" alone left the user to guess how far off the limit is
    need_batch, need = _smallest_need(fit, alone.known)
    return MaxBatchAnswer(
        None, False, limit, margin_bytes, context, needs_batch_size=need_batch, needs_bytes=need
    )


def _smallest_need(fit: FittedMemoryModel, lone_sample: bool) -> tuple[int, int]:
    """The smallest batch ``fit`` answers and its peak bytes on the GPU: batch 1, else (the
    fit refuses it, or the model cannot train on one sample: ``lone_sample``) the smallest
    traced batch, what the largest batch's answer says is needed when even that does not
    fit."""
    from danlu.estimate.memory import ExtrapolationError

    smallest = min(fit.estimates)
    if lone_sample:
        return smallest, fit.predict(smallest)
    try:
        return 1, fit.predict(1)
    except ExtrapolationError:
        return smallest, fit.predict(smallest)
