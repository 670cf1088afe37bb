"""The tracer subprocess: ``python -m danlu.estimate.memory.trace_worker``.

Reads one JSON :class:`TraceRequest` on stdin; writes JSON lines on stdout:
``{"progress": ...}`` while it works, then ``{"result": [StepTrace...]}`` or
``{"error": {"kind": ..., "field": ..., "message": ...}}``. Anything the user's code prints goes
to stderr. Imports torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from typing import IO, Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from danlu.core.errors import DanluError, SpecError
from danlu.estimate.memory import fused_kernels, kernels, steps, user_program
from danlu.estimate.memory.trace_result import (
    DDP_BUCKETS,
    LoneSampleError,
    StepTrace,
    TraceRequest,
    peak_in_window,
    spec_error_reply,
    window_live,
)

_TIMELINE_POINTS = 1000

STEADY_PASSES = 2
"""Forward/backward passes traced per step at most: the first creates the gradients, the
second adds to them; every later one repeats the second's allocations, so tracing all
``--accumulation`` passes (slow for many) changes no peak and no breakdown."""


SPARSE_LAYOUTS = (
    torch.sparse_coo,
    torch.sparse_csr,
    torch.sparse_csc,
    torch.sparse_bsr,
    torch.sparse_bsc,
)
"""Tensor layouts whose memory lies in several storages of a size the values decide."""


class SparseTensorMade(DanluError):
    """An op of the traced program returned a sparse tensor (``op``: its name), which has
    no one storage to count (:func:`_sparse_refused` reports it)."""

    def __init__(self, op: str) -> None:
        super().__init__(op)
        self.op = op


OPTIMIZER_PHASES = frozenset({"optimizer", "measured_optimizer"})
"""The tracker's phases of the optimizer's step (warm-up and measured)."""


def stand_in_scalar(t: torch.Tensor) -> complex | float | int | bool:
    """The value a fake one-element tensor's ``.item()`` reads as in the optimizer's step:
    one, of the tensor's kind.

    Fake tensors have no values, and some ``torch.optim`` optimizers read a few scalars in
    ``step()``: Adafactor the norms of each parameter and of its update (``.item()``), ASGD
    its ``eta`` and ``mu``. They scale the update but size no tensor, so the step's
    allocations are the same whatever is read; the trace failed instead, blaming the model
    ("MODEL_REF reads the values of a tensor"). One is ASGD's ``mu`` for its first million
    steps, the branch it takes then."""
    if t.dtype == torch.bool:
        return True
    if t.dtype.is_complex:
        return complex(1.0)
    if t.dtype.is_floating_point:
        return 1.0
    return 1


class StorageTracker(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts live tensor storage bytes: a storage is born when an op first returns it and
    dies when its weakref finalizer runs."""

    def __init__(self, target: str, probe_limit: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.target = target
        self.events: list[tuple[int, int]] = []
        self.live: dict[int, tuple[int, int]] = {}  # id(storage) -> (sid, nbytes)
        self.next_sid = 1
        self.sites: list[tuple[int, str, int]] = []
        self.marks: dict[str, int] = {}
        self.phase = "init"
        self.phase_log: list[tuple[int, str]] = []
        self.cublas_phases: set[str] = set()
        self.probe = kernels.CpuProbe(probe_limit) if target == "cpu" else None

    # -- bookkeeping -------------------------------------------------------------------
    def mark(self, phase: str) -> None:
        """Start a phase (``forward``, ``backward``, ``optimizer``...) at the current event."""
        self.phase = phase
        self.phase_log.append((len(self.events), phase))

    def _freed(self, key: int) -> None:
        entry = self.live.pop(key, None)
        if entry is not None:
            self.events.append((entry[0], -entry[1]))

    def sid_of(self, st: torch.UntypedStorage) -> int | None:
        """The id given to a storage, or None when the tracker never saw it."""
        entry = self.live.get(id(st))
        return entry[0] if entry else None

    def register(self, st: torch.UntypedStorage) -> None:
        """Count a storage (once)."""
        key = id(st)
        n = st.nbytes()
        entry = self.live.get(key)
        if entry is not None:
            if entry[1] != n:  # resized in place
                self.events.append((entry[0], n - entry[1]))
                self.live[key] = (entry[0], n)
            return
        sid = self.next_sid
        self.next_sid += 1
        self.live[key] = (sid, n)
        self.events.append((sid, n))
        weakref.finalize(st, self._freed, key)

    def pseudo(self, n: int) -> int:
        """Allocate ``n`` bytes the model's tensors do not hold (a kernel's workspace, DDP's
        buckets); returns its storage id (free it with ``events.append((sid, -n))``)."""
        sid = self.next_sid
        self.next_sid += 1
        self.events.append((sid, n))
        return sid

    # -- dispatch ------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = kernels.op_name(func)
        if name == "_local_scalar_dense" and self.phase in OPTIMIZER_PHASES:
            # a value the optimizer's step reads (the model's own reads stay refused)
            try:
                return func(*args, **kwargs)
            except DataDependentOutputException:
                return stand_in_scalar(args[0])
        out = func(*args, **kwargs)
        workspace = 0
        site = None
        if self.probe is not None and name in kernels.PROBED_OPS:
            workspace = self.probe.workspace(func, args, kwargs)
        elif self.target == "cuda":
            if (
                name in kernels.MATMUL_OPS
                and self.phase in ("forward", "backward")
                and self.phase not in self.cublas_phases
            ):
                self.cublas_phases.add(self.phase)  # one handle per thread: fwd and autograd
                self.sites.append((len(self.events), "cublas", 0))
            site = kernels.cuda_site(func, args, out)
        ws_sid = self.pseudo(workspace) if workspace else None
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                if t.layout in SPARSE_LAYOUTS:  # untyped_storage() raised NotImplementedError
                    raise SparseTensorMade(name)
                self.register(t.untyped_storage())
        if site is not None:
            # a kernel's workspace lives while the kernel writes its outputs: the site goes
            # after them (replay allocates it before the next event and frees it at once)
            self.sites.append((len(self.events), *site))
        if ws_sid is not None:
            self.events.append((ws_sid, -workspace))
        return out


def _trace_one(req: TraceRequest, batch_size: int) -> StepTrace:
    """The trace of ``req`` at ``batch_size``."""
    fused = fused_kernels.FusedKernelWatch(fused=req.target == "cuda")
    # watching before the user's module is imported (by the first trace): the names it
    # imports from torch.nn.functional (`from torch.nn.functional import dropout`) are
    # routed through the watch too
    with fused.watching():
        return _trace_watched(req, batch_size, fused)


def _trace_watched(
    req: TraceRequest, batch_size: int, fused: fused_kernels.FusedKernelWatch
) -> StepTrace:
    t0 = time.perf_counter()
    factory = steps.load_factory(req.model_ref, req.sys_path)
    foreach = True if req.target == "cuda" else None
    autocasts = user_program.AutocastWatch(req.precision)
    with (
        user_program.missing_files_refused(req.model_ref),
        _value_reads_refused(req.model_ref),
        _sparse_refused(req.model_ref),
        _cuda_refused(req.model_ref),
        autocasts.watching(),
        FakeTensorMode(allow_non_fake_inputs=False) as mode,
    ):
        _copies_keep_mode(mode)
        tracker = StorageTracker(req.target, req.probe_limit_bytes)
        with tracker:
            model, make_batch, loss_fn = _build(factory, req.model_ref, mode)
            model.train()
            modules, module_parameters = _layers(model)
            compiled = user_program.compiled_parts(model, make_batch, loss_fn)
            if req.checkpointing:
                steps.enable_checkpointing(model, req.model_ref)
            param_sids = {
                tracker.sid_of(s) for s in steps.storages([*model.parameters(), *model.buffers()])
            }
            # DDP's gradient buckets: allocated when the model is wrapped, never freed
            bucket_sids: set[int | None] = (
                {tracker.pseudo(n) for n in steps.ddp_bucket_sizes(model)}
                if req.data_parallel
                else set()
            )
            opt = steps.make_optimizer(req.optimizer, model, foreach)
            batch = steps.checked_batch(make_batch(batch_size), req.model_ref)
            _check_meta(model, batch, req.model_ref)
            batch_sids = {tracker.sid_of(s) for s in steps.storages(batch)}
            passes = min(req.accumulation, STEADY_PASSES)
            with _lone_sample_refused(req.model_ref, batch_size):
                steps.train_step(model, opt, batch, loss_fn, req.precision, passes, tracker.mark)
            host: set[int | None] = set()
            if req.target == "cuda":
                for state in opt.state.values():
                    if isinstance(state.get("step"), torch.Tensor):
                        host.add(tracker.sid_of(state["step"].untyped_storage()))
            grad_sids: set[int | None] = set()
            grad_bytes: dict[int | None, int] = {}  # each gradient storage's bytes
            params = list(model.parameters())

            def mark(phase: str, params: list[torch.nn.Parameter] = params) -> None:
                if phase == "optimizer":
                    for p in params:
                        if p.grad is not None:
                            storage = p.grad.untyped_storage()
                            grad_bytes[tracker.sid_of(storage)] = storage.nbytes()
                    grad_sids.update(grad_bytes)
                tracker.mark("measured_" + phase)

            tracker.marks["measure_start"] = len(tracker.events)
            with autocasts.recording():
                steps.train_step(model, opt, batch, loss_fn, req.precision, passes, mark)
            tracker.marks["measure_end"] = len(tracker.events)
            opt_sids = {tracker.sid_of(s) for s in steps.storages(list(opt.state.values()))}
            del model, opt, batch, make_batch, loss_fn, params
    for idx, phase in tracker.phase_log:
        if phase.startswith("measured_"):
            tracker.marks.setdefault(phase[len("measured_") :], idx)
    host_ids = sorted(s for s in host if s is not None)
    events = tracker.events[: tracker.marks["measure_end"]]
    start, end = tracker.marks["measure_start"], tracker.marks["measure_end"]
    peak, where, at_start = peak_in_window(events, start, end, frozenset(host_ids))
    breakdown = _breakdown(
        events,
        where,
        tracker.phase_log,
        start,
        frozenset(host_ids),
        param_sids,
        grad_sids,
        opt_sids,
        batch_sids,
        bucket_sids,
    )
    warnings = [user_program.compiled_warning(compiled)] if compiled else []
    autocast_warning = autocasts.warning()
    if autocast_warning:
        warnings.append(autocast_warning)
    if tracker.probe is not None and tracker.probe.skipped:
        warnings.append(
            "kernel buffers not measured (over the probe limit) for: "
            + ", ".join(sorted(tracker.probe.skipped))
        )
    if tracker.probe is not None and tracker.probe.failed:
        warnings.append(
            "kernel buffers not measured (probe failed) for: "
            + ", ".join(sorted(tracker.probe.failed))
        )
    opt_at = tracker.marks["optimizer"]
    hosts = frozenset(host_ids)
    return StepTrace(
        batch_size=batch_size,
        events=events,
        marks=tracker.marks,
        peak_logical_bytes=peak,
        step_start_bytes=at_start,
        breakdown=breakdown,
        timeline=_timeline(events, start, end, frozenset(host_ids)),
        sites=[s for s in tracker.sites if s[0] < end],
        host_ids=host_ids,
        warnings=warnings,
        trace_seconds=time.perf_counter() - t0,
        window_live=window_live(events, start, end, hosts),
        phase_peaks={
            # forward/backward passes vs optimizer step: each is linear in b
            "passes": peak_in_window(events, start, opt_at, hosts)[0],
            "optimizer": peak_in_window(events, opt_at, end, hosts)[0],
        },
        modules=modules,
        module_parameters=module_parameters,
        attention_calls=fused.attention_calls,
        gradient_bytes=sum(grad_bytes.values()),
        peak_phase=_phase_at(tracker.phase_log, where),
    )


def _phase_at(phase_log: list[tuple[int, str]], event: int) -> str:
    """The phase of the measured step (``forward``, ``backward``, ``optimizer``,
    ``zero_grad``) that ``event`` belongs to: the last measured phase marked at or before it
    (a mark holds the index of the event after it)."""
    phase = "forward"
    for idx, name in phase_log:
        if idx > event:
            break
        if name.startswith("measured_") and name != "measured_end":
            phase = name[len("measured_") :]
    return phase


@contextlib.contextmanager
def _value_reads_refused(model_ref: str) -> Iterator[None]:
    """A :class:`SpecError` on ``MODEL_REF`` when the factory, ``make_batch``, the model or
    ``loss_fn`` reads a tensor's values, which the fake tensors of a trace do not have: the
    trace failed with torch's ``DataDependentOutputException: aten._local_scalar_dense``
    (``.item()``, ``int(t)``, ``if t:``) or ``DynamicOutputShapeException: aten.nonzero``
    (a selection by a boolean mask) alone, saying neither what in the program nor the fix."""
    try:
        yield
    except (DataDependentOutputException, DynamicOutputShapeException) as exc:
        raise SpecError(
            "MODEL_REF",
            f"{model_ref} reads the values of a tensor ({type(exc).__name__}: {exc}): the "
            "tracer runs the step on fake tensors, which have shapes but no values, so it "
            "cannot follow .item(), int(t), `if t:`, or a tensor whose size depends on the "
            "values (indexing by a boolean mask, nonzero, unique); compute without them "
            "(torch.where in place of a mask's selection, a loss's ignore_index, sizes from "
            "shapes)",
        ) from None


@contextlib.contextmanager
def _sparse_refused(model_ref: str) -> Iterator[None]:
    """A :class:`SpecError` on ``MODEL_REF`` when the traced program makes a sparse tensor
    (:class:`SparseTensorMade`): the sparse gradient of an ``nn.Embedding(sparse=True)``, as
    recommendation models use, failed the trace with torch's bare "NotImplementedError:
    Cannot access storage of SparseTensorImpl"."""
    try:
        yield
    except SparseTensorMade as exc:
        raise SpecError(
            "MODEL_REF",
            f"{model_ref} makes a sparse tensor ({exc.op}; e.g. the gradient of an "
            "nn.Embedding or nn.EmbeddingBag with sparse=True): the tracer cannot size it "
            "(its number of entries depends on the values, which fake tensors do not have); "
            "trace the model with sparse=False, whose dense gradients hold the whole table",
        ) from None


CUDA_REFUSALS = (
    "not linked with support for cuda",
    "not compiled with cuda",
    "no nvidia driver",
    "no cuda gpus",
    "cuda driver initialization failed",
    "at least two devices",
    "two different devices",
)
"""What torch says (lower-cased) when a tensor is put on a CUDA device where the tracer
runs: a torch without CUDA, a machine without a GPU, or a model on a CUDA device beside a
batch on the CPU."""


@contextlib.contextmanager
def _cuda_refused(model_ref: str) -> Iterator[None]:
    """A :class:`SpecError` on ``MODEL_REF`` when the factory, its model's ``__init__`` or
    ``make_batch`` puts tensors on a CUDA device (``.cuda()``, ``.to("cuda")``,
    ``device="cuda"``): the trace failed with torch's bare "PyTorch is not linked with
    support for cuda devices" and the traceback of the program, saying neither the fix nor
    that ``danlu.train`` moves the model and the batch to the GPU itself."""
    try:
        yield
    except (RuntimeError, AssertionError) as exc:
        said = str(exc).lower()
        if "cuda" not in said or not any(what in said for what in CUDA_REFUSALS):
            raise
        raise SpecError(
            "MODEL_REF",
            f"{model_ref} puts tensors on a CUDA device ({type(exc).__name__}: {exc}): the "
            "tracer builds the model and the batch on the CPU, with fake tensors that "
            "allocate nothing; return them on the CPU, without .cuda(), .to('cuda') or "
            "torch.set_default_device('cuda') in the factory, the model's __init__ or "
            "make_batch (danlu.train moves the model and each batch to the GPU)",
        ) from None


@contextlib.contextmanager
def _lone_sample_refused(model_ref: str, batch_size: int) -> Iterator[None]:
    """A :class:`LoneSampleError` (on ``--batch-size``) when a step of one sample fails as
    batch normalisation fails it in training ("Expected more than 1 value per channel"): the trace
    failed with torch's error alone, from ``danlu estimate``'s default ``--fit-points 1,2,4``
    too, naming neither the batch size nor the fix."""
    try:
        yield
    except ValueError as exc:
        if batch_size != 1 or "more than 1 value per channel" not in str(exc):
            raise
        raise LoneSampleError(
            f"{model_ref} cannot train on a batch of 1 sample ({exc}: batch normalisation "
            "needs two samples or more in training); trace batch sizes of 2 or more "
            "(danlu estimate: e.g. --fit-points 2,4,8; a job: training.global_batch_size "
            "of 2 or more per GPU)",
        ) from None


@contextlib.contextmanager
def _swappable_fakes(mode: FakeTensorMode) -> Iterator[None]:
    """Let ``Module._apply`` (``model.to(...)``, ``.float()``, ``.half()``...) convert the
    fake parameters of ``mode``.

    Under a fake mode ``Module._apply`` always replaces a parameter's contents in place with
    ``torch.utils.swap_tensors``, which refuses a tensor any weakref points to; and the fake
    mode's converter memo (a ``WeakValueDictionary``) holds one to every ``Parameter`` made
    under it. Those memo entries are keyed by the ids of transient meta tensors that are never
    looked up again, so dropping them before the swap loses nothing, and the swap keeps the
    parameter's identity (an optimizer built later sees the converted one). Any other weakref
    still makes the swap fail (see :func:`_build`)."""
    memo = mode.fake_tensor_converter.tensor_memo
    original: Callable[[torch.Tensor, torch.Tensor], None] = torch.utils.swap_tensors

    def swap(t1: torch.Tensor, t2: torch.Tensor) -> None:
        for t in (t1, t2):
            if isinstance(t, FakeTensor):
                keys = [
                    ref.key
                    for ref in weakref.getweakrefs(t)
                    if isinstance(ref, weakref.KeyedRef) and memo.get(ref.key) is t
                ]
                for key in keys:
                    del memo[key]
        original(t1, t2)

    torch.utils.swap_tensors = swap
    try:
        yield
    finally:
        torch.utils.swap_tensors = original


def _build(
    factory: Callable[[], Any], model_ref: str, mode: FakeTensorMode
) -> tuple[torch.nn.Module, Any, Any]:
    """:func:`steps.build` under ``mode``, with the factory free to move or cast its model
    (:func:`_swappable_fakes`); a parameter that still cannot be converted (something else
    holds a weakref to it) is a :class:`SpecError` on ``MODEL_REF`` saying what to change."""
    try:
        with _swappable_fakes(mode):
            return steps.build(factory, model_ref)
    except RuntimeError as exc:
        cause = exc.__cause__
        if "Couldn't swap" not in str(exc) or "weakref" not in str(cause):
            raise
        raise SpecError(
            "MODEL_REF",
            f"{model_ref} converts its model (.to(), .half(), .float()...) while something "
            f"holds a weakref to a parameter ({exc}: {cause}); the tracer cannot convert such "
            "a parameter: build the model in its final dtype and device (e.g. "
            "nn.Linear(..., dtype=torch.float16)), or convert it before taking the weakrefs",
        ) from None


def _copies_keep_mode(mode: FakeTensorMode) -> None:
    """Make ``copy.deepcopy`` of a fake tensor of ``mode`` a fake tensor of ``mode``.

    ``Tensor.__deepcopy__`` deep-copies a tensor's ``__dict__``, and a fake tensor's holds
    its fake mode: the copy belonged to a new mode, and the first op mixing it with the
    model's other tensors failed with torch's "AssertionError: Mixing fake modes NYI". No
    model that copies a layer as it is built could be traced: ``nn.TransformerEncoder`` and
    ``nn.TransformerDecoder`` (each clones its layer ``num_layers`` times), an EMA copy. The
    mode is the trace's context, not the tensor's data: each copy keeps the one mode (on this
    trace's mode only; ``copy.deepcopy`` looks ``__deepcopy__`` up on the instance)."""
    mode.__deepcopy__ = lambda memo: mode  # type: ignore[attr-defined]


def _check_meta(model: torch.nn.Module, batch: Any, model_ref: str) -> None:
    """A :class:`SpecError` on ``MODEL_REF`` when the model or the batch is on the ``meta``
    device and the other is not: the step failed inside torch with a device mismatch
    ("found at least two devices, cpu and meta") that named neither. Both on ``meta``
    trace as on ``cpu`` (the tracer fakes every tensor: shapes and dtypes are what count)."""
    model_devices = {t.device.type for t in [*model.parameters(), *model.buffers()]}
    batch_devices = {t.device.type for t in steps.tensors(batch)}
    on_meta = [
        what
        for what, devices in (("its model", model_devices), ("make_batch's tensors", batch_devices))
        if "meta" in devices
    ]
    if on_meta and len(model_devices | batch_devices) > 1:
        raise SpecError(
            "MODEL_REF",
            f"{model_ref} puts {' and '.join(on_meta)} on the meta device, and other tensors "
            f"on {', '.join(sorted((model_devices | batch_devices) - {'meta'}))}: one step "
            "cannot mix them; build the model and the batch on cpu (the tracer fakes every "
            "tensor, so nothing is allocated) or both on meta",
        )


_CONTAINERS: tuple[type[torch.nn.Module], ...] = (
    torch.nn.Module,
    torch.nn.Sequential,
    torch.nn.ModuleList,
    torch.nn.ModuleDict,
    torch.nn.ParameterList,
    torch.nn.ParameterDict,
)
"""The ``torch.nn`` classes a model's own module classes derive from without being one of
its layers: such a class keeps its own name (:func:`_layer_name`)."""


def _layer_name(cls: type[torch.nn.Module]) -> str:
    """The name a module of class ``cls`` is summarised under: the first ``torch.nn`` layer
    class it is (``torch.nn.modules``: ``Conv2d`` for a ``class MyConv(nn.Conv2d)`` or for
    the ``ParametrizedConv2d`` that ``spectral_norm`` and ``weight_norm`` make), else its
    own name (a model's ``Block(nn.Module)``). Under their own names such layers were none
    of the layers :func:`~danlu.estimate.family.infer_family` looks for."""
    for base in cls.__mro__:
        if base in _CONTAINERS:
            break
        if base.__module__.startswith("torch.nn.modules."):
            return base.__name__
    return cls.__name__


def _own_parameters(module: torch.nn.Module) -> Iterator[torch.nn.Parameter]:
    """The parameters ``module`` holds directly, and those its parametrizations hold for it
    (``spectral_norm``'s ``weight.original``, in a ``ParametrizationList`` below it)."""
    yield from module.parameters(recurse=False)
    parametrizations = getattr(module, "parametrizations", None)
    if torch.nn.utils.parametrize.is_parametrized(module) and isinstance(
        parametrizations, torch.nn.Module
    ):
        yield from parametrizations.parameters()


def _layers(model: torch.nn.Module) -> tuple[dict[str, int], dict[str, int]]:
    """The model's modules by class name (:func:`_layer_name`), and the parameters each
    class holds directly (:func:`_own_parameters`).

    A parameter two modules share (tied weights: a language model's output layer holding
    its embedding's table) counts once, for the first module that holds it (as
    ``model.parameters()`` lists it): it was counted for each, and the summary's total
    and shares (:mod:`danlu.estimate.family`) grew by it."""
    modules: dict[str, int] = {}
    parameters: dict[str, int] = {}
    seen: set[int] = set()
    for module in model.modules():
        name = _layer_name(type(module))
        modules[name] = modules.get(name, 0) + 1
        held = 0
        for p in _own_parameters(module):
            if id(p) not in seen:
                seen.add(id(p))
                held += p.numel()
        if held:
            parameters[name] = parameters.get(name, 0) + held
    return modules, parameters


def _breakdown(
    events: list[tuple[int, int]],
    where: int,
    phase_log: list[tuple[int, str]],
    start: int,
    host: frozenset[int],
    params: set[Any],
    grads: set[Any],
    opt_state: set[Any],
    batch: set[Any],
    buckets: set[Any],
) -> dict[str, int]:
    forward_ranges: list[tuple[int, int]] = []
    for i, (idx, phase) in enumerate(phase_log):
        if phase == "measured_forward":
            nxt = phase_log[i + 1][0] if i + 1 < len(phase_log) else len(events)
            forward_ranges.append((idx, nxt))
    live: dict[int, tuple[int, int]] = {}
    for i, (sid, delta) in enumerate(events[: where + 1]):
        if sid in host:
            continue
        if delta > 0 and sid not in live:
            live[sid] = (delta, i)
        elif delta < 0:
            size, born = live.pop(sid, (0, i))
            if size + delta > 0:
                live[sid] = (size + delta, born)
        else:
            size, born = live.get(sid, (0, i))
            live[sid] = (size + delta, born)
    out = dict.fromkeys(
        ("parameters", "gradients", "optimizer_state", "activations", "temporaries"), 0
    )
    if buckets:
        out[DDP_BUCKETS] = 0
    for sid, (size, born) in live.items():
        if sid in params:
            key = "parameters"
        elif sid in buckets:
            key = DDP_BUCKETS
        elif sid in grads:
            key = "gradients"
        elif sid in opt_state:
            key = "optimizer_state"
        elif sid in batch or any(a <= born < b for a, b in forward_ranges):
            key = "activations"
        else:
            key = "temporaries"
        out[key] += size
    return out


def _timeline(
    events: list[tuple[int, int]], start: int, end: int, host: frozenset[int]
) -> list[tuple[int, int]]:
    live = 0
    points: list[tuple[int, int]] = []
    stride = max(1, (end - start) // _TIMELINE_POINTS)
    for i, (sid, delta) in enumerate(events[:end]):
        if sid not in host:
            live += delta
        if i >= start and ((i - start) % stride == 0 or i == end - 1):
            points.append((i - start, live))
    return points


def run(req: TraceRequest, out: IO[str]) -> None:
    """Trace every batch size of ``req``, reporting progress and the result on ``out``."""
    results = []
    for n, b in enumerate(req.batch_sizes):
        out.write(
            json.dumps({"progress": {"done": n, "total": len(req.batch_sizes), "batch_size": b}})
            + "\n"
        )
        out.flush()
        with user_program.exit_refused(req.model_ref):  # (at import too)
            results.append(_trace_one(req, b).to_json())
    out.write(json.dumps({"result": results}) + "\n")
    out.flush()


def _warm_up() -> None:
    """Pay torch's first-use costs before the request arrives: the first ``FakeTensorMode``
    imports ``torch._dynamo`` (~2 s) and the first operators fill dispatch caches. Touches no
    user code and no random state that a trace reads (the trace seeds torch itself), so a
    worker started ahead of need (``WarmTracers``) has them done while it waits."""
    with FakeTensorMode():
        layer = torch.nn.Linear(4, 4)
        layer(torch.ones(2, 4)).sum().backward()


def main() -> int:
    """Entry point: protocol on the original stdout, everything else to stderr."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        _warm_up()
        req = TraceRequest.from_json(json.loads(sys.stdin.read()))
        torch.manual_seed(0)
        run(req, proto)
        return 0
    except SpecError as exc:
        err = spec_error_reply(exc)
    except Exception as exc:  # report any failure of user code to the parent
        traceback.print_exc()
        err = {"kind": "trace", "field": "", "message": user_program.failure_words(exc)}
    proto.write(json.dumps({"error": err}) + "\n")
    proto.flush()
    return 2


if __name__ == "__main__":
    sys.exit(main())
