"""Plain data exchanged between the tracer subprocess and the parent (no torch here)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from danlu.core.errors import SpecError
from danlu.core.spec_training import PRECISION_SPELLINGS as PRECISION_SPELLINGS
from danlu.core.spec_training import PRECISIONS as PRECISIONS
from danlu.core.spec_training import Precision as Precision
from danlu.core.spec_training import precision_name as precision_name

Target = Literal["cuda", "cpu"]
TARGETS: tuple[str, ...] = ("cuda", "cpu")
BREAKDOWN_KEYS: tuple[str, ...] = (
    "parameters",
    "gradients",
    "optimizer_state",
    "activations",
    "temporaries",
)
DDP_BUCKETS = "ddp_buckets"
"""The breakdown's key for DistributedDataParallel's gradient buckets (only in traces of a
:attr:`TraceRequest.data_parallel` step)."""


@dataclass(frozen=True)
class TraceRequest:
    """What to trace.

    ``target`` chooses the kernel paths to imitate: ``"cuda"`` (the default: what the step
    would do on an NVIDIA GPU: foreach optimizers, cuBLAS workspaces, CPU-resident step
    counters) or ``"cpu"`` (what it does on this machine's CPU, with the real CPU kernels'
    internal buffers measured by running each such kernel once: used to check the tracer
    against the real CPU allocator).

    ``data_parallel``: the step runs under ``DistributedDataParallel`` (a job on more than one
    GPU), as ``danlu.train`` wraps it: with DDP's default ``gradient_as_bucket_view=False``
    its gradient buckets are one more buffer of the parameters' gradient bytes, allocated when
    the model is wrapped and held for good (the breakdown's ``ddp_buckets``; split as DDP
    rebuilds them after its first iteration: 1 MiB first, then 25 MiB, per dtype; the
    transient of that rebuild is not modelled). Off by default: the tracer cannot know how
    many GPUs the job gets.
    """

    model_ref: str
    batch_sizes: tuple[int, ...]
    precision: Precision = "fp32"
    optimizer: str = "adamw"
    checkpointing: bool = False
    accumulation: int = 1
    target: Target = "cuda"
    probe_limit_bytes: int = 1 << 30
    sys_path: tuple[str, ...] = ()
    data_parallel: bool = False

    def __post_init__(self) -> None:
        # "BF16" (which danlu.train takes) was refused here, and autocast read any name but
        # "bf16" and "fp32" as float16
        object.__setattr__(self, "precision", precision_name(self.precision))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TraceRequest:
        """Inverse of :meth:`to_json`."""
        data = dict(data)
        data["batch_sizes"] = tuple(data["batch_sizes"])
        data["sys_path"] = tuple(data.get("sys_path", ()))
        return cls(**data)


class LoneSampleError(SpecError):
    """The traced model cannot train on a batch of one sample (batch normalisation in
    training: torch's "Expected more than 1 value per channel"). A :class:`SpecError` on
    ``--batch-size``: a caller that chose the batch sizes itself (``danlu estimate``'s
    default fit points) tells it by its type and traces from 2 on instead."""

    CONDITION = "lone_sample"
    """The worker's name of this condition in its ``{"error": ...}`` reply."""

    def __init__(self, message: str) -> None:
        super().__init__("--batch-size", message)


def spec_error_reply(exc: SpecError) -> dict[str, str]:
    """The trace worker's ``{"error": ...}`` reply body for ``exc``; a
    :class:`LoneSampleError` is named by its ``condition``."""
    reply = {"kind": "spec", "field": exc.field, "message": exc.message}
    if isinstance(exc, LoneSampleError):
        reply["condition"] = LoneSampleError.CONDITION
    return reply


def spec_error_from_reply(error: dict[str, str]) -> SpecError:
    """The :class:`SpecError` a worker's ``{"kind": "spec", ...}`` error reply reports
    (inverse of :func:`spec_error_reply`): a :class:`LoneSampleError` when its
    ``condition`` names one, else a plain :class:`SpecError`."""
    if error.get("condition") == LoneSampleError.CONDITION:
        return LoneSampleError(error["message"])
    return SpecError(error["field"], error["message"])


def module_path_problem(module_name: str) -> str:
    """Why ``module_name`` (a model reference's part before ``:``) cannot be imported as
    the absolute module path the tracer imports (``""``: it may be): a file path
    (``./models.py``), a relative import (``.zoo``) or an empty part (``a..b``). The message
    completes "cannot import ...": it says to give a module path instead."""
    if all(part.isidentifier() for part in module_name.split(".")):
        return ""
    return file_path_problem(module_name)


def file_path_problem(module_name: str) -> str:
    """The message of :func:`module_path_problem` for ``module_name``, a file's path or name
    (``./models.py``, ``models.py``): "cannot import ...", saying to give a module path."""
    stem = module_name.rstrip("/").rsplit("/", 1)[-1].removesuffix(".py").lstrip(".")
    example = stem if stem.isidentifier() else "package.module"
    return (
        f"cannot import {module_name!r}: give a module path, not a file path or a relative "
        f"import, e.g. {example}:factory run from the directory that holds {example}.py "
        "(or with it on PYTHONPATH)"
    )


@dataclass
class StepTrace:
    """The logical allocation sequence of one traced run at one batch size.

    ``events`` holds ``(storage_id, delta_bytes)``: positive when the storage is allocated,
    negative when it is freed, in program order, from model creation to the end of the
    measured (steady-state) step. ``marks`` names event indices (``measure_start``,
    ``measure_end`` and the phase ends of the measured step). ``sites`` are places where a
    GPU would allocate something the trace cannot see, as ``(event_index, kind, hint_bytes)``
    (``cublas``: a cuBLAS handle's workspace; ``conv``: a cuDNN workspace, ``attn_bwd``: an
    attention backward's accumulators), applied by the allocator model per GPU type.
    ``host_ids`` are storages that live in host memory on a GPU (optimizer step counters).
    ``modules`` counts the model's modules by class name and ``module_parameters`` the
    parameters each class holds directly, ``attention_calls`` the calls of torch's
    ``scaled_dot_product_attention`` in the traced steps (what :mod:`danlu.estimate.family`
    reads). ``gradient_bytes`` is the gradients' own size (every trainable parameter's, as the
    optimizer step finds them), whatever of them ``breakdown`` finds live at the peak, and
    ``peak_phase`` the phase of the measured step the peak is in (``forward``, ``backward``,
    ``optimizer`` or ``zero_grad``; ``""``: not known, a trace of an older worker).
    """

    batch_size: int
    events: list[tuple[int, int]]
    marks: dict[str, int]
    peak_logical_bytes: int
    step_start_bytes: int
    breakdown: dict[str, int]
    timeline: list[tuple[int, int]] = field(default_factory=list)
    sites: list[tuple[int, str, int]] = field(default_factory=list)
    host_ids: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    trace_seconds: float = 0.0
    phase_peaks: dict[str, int] = field(default_factory=dict)
    window_live: list[int] = field(default_factory=list)
    modules: dict[str, int] = field(default_factory=dict)
    module_parameters: dict[str, int] = field(default_factory=dict)
    attention_calls: int = 0
    gradient_bytes: int = 0
    peak_phase: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepTrace:
        """Inverse of :meth:`to_json`."""
        data = dict(data)
        data["events"] = [(int(a), int(b)) for a, b in data["events"]]
        data["timeline"] = [(int(a), int(b)) for a, b in data.get("timeline", [])]
        data["sites"] = [(int(a), str(b), int(c)) for a, b, c in data.get("sites", [])]
        return cls(**data)


def peak_in_window(
    events: list[tuple[int, int]], start: int, end: int, exclude: frozenset[int] = frozenset()
) -> tuple[int, int, int]:
    """Replay ``events`` and return ``(peak live bytes in [start, end), index, live at start)``.

    Storages in ``exclude`` are not counted.
    """
    live = 0
    at_start = 0
    peak = -1
    where = start
    for i, (sid, delta) in enumerate(events[:end]):
        if i == start:
            at_start = live
            peak, where = live, i
        if sid not in exclude:
            live += delta
        if i >= start and live > peak:
            peak, where = live, i
    if start >= len(events[:end]):
        at_start = live
        peak = max(peak, live)
    return peak, where, at_start


def window_live(
    events: list[tuple[int, int]], start: int, end: int, host: frozenset[int] = frozenset()
) -> list[int]:
    """Live bytes at the start of the measured step ``[start, end)`` and after each of its
    events, the storages in ``host`` not counted, with each run of consecutive events that
    allocate nothing (frees) taken in storage-id order.

    Frees come from weakref finalizers, whose order within a run differs from run to run and
    from one batch size to another (the autocast cache's casts): in trace order the curves
    of two traces would pair different frees at the same index, and the envelope fitted to
    them (:class:`~danlu.estimate.memory.fit.EnvelopeFit`) would join different program
    points by one line. Storage ids number allocations in program order, the same at every
    b, so this order is one program's at every b. A run of frees only lowers the curve:
    its peak and the live bytes after the run are those of the trace's own order.
    """
    live = sum(d for sid, d in events[:start] if sid not in host)
    deltas: list[int] = []
    run: list[tuple[int, int]] = []  # the current run of frees, as (storage id, delta)
    for sid, delta in events[start:end]:
        counted = 0 if sid in host else delta
        if counted <= 0:
            run.append((sid, counted))
            continue
        deltas += [d for _, d in sorted(run, key=lambda e: e[0])]
        deltas.append(counted)
        run = []
    deltas += [d for _, d in sorted(run, key=lambda e: e[0])]
    out = [live]
    for delta in deltas:
        live += delta
        out.append(live)
    return out
