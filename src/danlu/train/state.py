"""Full training state: capture it as CPU copies, restore it exactly.

:func:`capture_state` gathers everything a bit-exact resume needs — model, optimizer,
LR scheduler, GradScaler, the RNG states of python ``random``, numpy's global generator,
torch's CPU generator and every CUDA generator, the data position, the step and the metric
history — into a plain nested ``dict`` whose tensors are CPU copies owned by the caller.
RNG states are stored in JSON-safe or tensor form, so a checkpoint of the state loads with
``torch.load(weights_only=True)`` and never unpickles arbitrary objects.

:func:`restore_state` puts such a dict back into live objects and returns what the caller
needs to continue (:class:`RestoredInfo`).
"""

from __future__ import annotations

import copy
import logging
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from danlu.core.errors import ConfigError, DataError

if TYPE_CHECKING:
    from danlu.train.data import ElasticSampler

log = logging.getLogger("danlu.train")

STATE_VERSION = 1
"""Version of the state layout written by :func:`capture_state`."""

__all__ = [
    "STATE_VERSION",
    "CapturedState",
    "Counters",
    "IncompatibleCheckpointError",
    "RestoredInfo",
    "StoredRun",
    "capture_rng_state",
    "capture_state",
    "check_compatible",
    "parse_rng_state",
    "restore_rng_state",
    "restore_state",
    "resume_refused",
    "stored_counters",
    "stored_data_state",
    "stored_run",
]


class CapturedState(dict[str, Any]):
    """The ``dict`` returned by :func:`capture_state`.

    ``owned`` is True when every tensor in it is a private CPU copy, so a
    :class:`~danlu.train.checkpoint.CheckpointManager` may persist it in the background
    without copying it again. Hand such a state to the manager and do not mutate it after.

    ``guards`` (``copy=False`` only) are the optimizers whose ``step()`` is the only thing
    that changes the live tensors in the state (parameters and optimizer state): the
    manager may copy them in the background and make the next ``step()`` wait for that.
    """

    owned: bool = False
    guards: tuple[torch.optim.Optimizer, ...] = ()


class IncompatibleCheckpointError(ConfigError, DataError):
    """A training state that does not fit the live objects (:func:`check_compatible`):
    the script's setting differs from the checkpoint's (a :class:`ConfigError`), and the
    state cannot be loaded (a :class:`DataError`, as a missing component always was)."""


def stored_count(value: Any, what: str, least: int | None = 0) -> int:
    """``value``, a count a checkpoint's state holds (``what`` names it), as an int: a whole
    number (or a float of one, ``3.0``) of at least ``least`` (None: of any sign, a seed).
    ``ValueError`` otherwise (a bool, ``2.5``, a NaN, a string, a negative count: a damaged
    checkpoint), which a resume reports as an incompatible checkpoint naming the part;
    ``int()`` read ``true`` as 1 and ``2.5`` as 2, and raised a bare error for ``"abc"``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        bound = "" if least is None else f" >= {least}"
        raise ValueError(f"{what} {value!r} is not a whole number{bound}")
    if least is not None and value < least:
        raise ValueError(f"{what} {value!r} is not a whole number >= {least}")
    return value


def stored_rate(value: Any, what: str) -> float:
    """``value``, a rate or multiplier a checkpoint's state holds (``what`` names it), as a
    float; ``ValueError`` unless it is a finite number >= 0 (a NaN LR trained every later
    step at a NaN LR)."""
    number = math.nan if isinstance(value, bool) else float(value)
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(f"{what} {value!r} is not a finite number >= 0")
    return number


class Counters(NamedTuple):
    """The run's counters a :class:`~danlu.train.context.TrainContext`'s checkpoint keeps in
    its ``data_state`` beside the parts' states (:func:`stored_counters`)."""

    skipped_steps: int
    """Steps the GradScaler skipped (an fp16 overflow)."""
    rollbacks: int
    """Anomaly rollbacks so far (each compounds the LR's decay)."""
    engine_steps: int
    """Optimizer steps taken, applied or skipped (the cadences count them)."""
    scheduler_batch: int | None
    """The global batch the scheduler last set (None: it set none)."""


def stored_counters(data_state: Mapping[str, Any], live: Counters) -> Counters:
    """The :class:`Counters` a checkpoint's ``data_state`` holds, each one it lacks (an
    older checkpoint) ``live``'s: whole numbers >= 0 (a float of one, ``3.0``, read as it),
    the ``scheduler_batch`` >= 1 or None. ``ValueError`` naming the counter for any other
    value (a damaged checkpoint: ``int()`` read ``true`` as 1, ``2.5`` as 2, ``-3`` as is,
    and raised a bare error for ``"abc"`` or a NaN)."""

    def read(name: str, least: int) -> int:
        return stored_count(data_state.get(name, getattr(live, name)), f"its {name}", least)

    scheduler_batch = data_state.get("scheduler_batch", live.scheduler_batch)
    return Counters(
        skipped_steps=read("skipped_steps", 0),
        rollbacks=read("rollbacks", 0),
        engine_steps=read("engine_steps", 0),
        scheduler_batch=None if scheduler_batch is None else read("scheduler_batch", 1),
    )


def stored_data_state(value: Any) -> dict[str, Any]:
    """A checkpoint's ``data_state`` (what a :class:`~danlu.train.context.TrainContext`
    keeps beside the model) as the dict it reads its parts and counters from: None (a state
    captured without one) is an empty one. ``ValueError`` for anything else but a dict (a
    damaged checkpoint: a list or a string raised a bare ``AttributeError`` at the first
    ``.get``, and a falsy one, ``0`` or ``[]``, resumed without its data position)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"its data_state {_short(value)} is not a dict")
    return value


PART_STATES = ("sampler", "batch", "lr", "anomaly", "norm_cadence", "goodput", "gns")
"""The parts of a context's ``data_state`` that are each a part's ``state_dict()`` (or None:
a run without the part)."""


class StoredRun(NamedTuple):
    """What a :class:`~danlu.train.context.TrainContext` keeps of a checkpoint besides the
    objects' states, read and checked by :func:`stored_run` before anything is loaded."""

    step: int
    counters: Counters
    data_state: dict[str, Any]
    """The parts' states (each a dict or None), the counters and ``metrics_pending``."""
    history: list[dict[str, Any]]
    extra: dict[str, Any]
    metrics_pending: list[dict[str, Any]] | None
    """The metric requests the checkpoint kept unshipped (None: it kept none)."""


def stored_run(state: Any, *, rollbacks: int, scheduler_batch: int | None) -> StoredRun:
    """Read and check what a context's checkpoint ``state`` (a :func:`capture_state` dict)
    holds besides the model, optimizer, scheduler and scaler states: its step, metric
    history, ``extra`` and ``data_state`` (the parts' states, the counters:
    :func:`stored_counters`, the unshipped metric requests). Nothing is loaded or assigned
    here, so a resume that calls it first leaves every live object as it was when the
    checkpoint is refused. A counter the checkpoint lacks (an older one) is the live value
    given (``rollbacks``, ``scheduler_batch``), 0 skipped steps, and as many engine steps as
    its step. ``ValueError`` naming the field for a damaged checkpoint: a step or counter
    that is no whole number, a history that is not a list of records (dicts), an
    ``extra``, a ``data_state`` or a part's state that is not a dict, a ``metrics_pending``
    that is not a list of requests (dicts; a request of another layout is left to
    :meth:`~danlu.train.report.MetricsReporter.resend`, which drops it with a WARNING).
    A ``state`` that is no dict at all is :func:`restore_state`'s to refuse."""
    get = state.get if isinstance(state, dict) else {}.get
    step = stored_count(get("step", 0), "the training state's step")
    history = get("metrics_history")
    if history is None:
        history = []
    if not isinstance(history, list) or not all(isinstance(r, dict) for r in history):
        raise ValueError(f"its metrics_history {_short(history)} is not a list of records")
    extra = get("extra")
    if extra is None:
        extra = {}
    if not isinstance(extra, dict):
        raise ValueError(f"its extra {_short(extra)} is not a dict")
    data_state = stored_data_state(get("data_state"))
    for part in PART_STATES:
        value = data_state.get(part)
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"its data_state's {part!r} state {_short(value)} is not a dict")
    pending = data_state.get("metrics_pending")
    if pending is not None and (
        not isinstance(pending, list) or not all(isinstance(r, dict) for r in pending)
    ):
        raise ValueError(
            f"its metrics_pending {_short(pending)} is not a list of metric requests (dicts)"
        )
    live = Counters(0, rollbacks, step, scheduler_batch)
    counters = stored_counters(data_state, live)
    return StoredRun(step, counters, data_state, list(history), dict(extra), pending)


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (a damaged part may be large)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def resume_refused(step: int, directory: object, problem: str) -> IncompatibleCheckpointError:
    """The error of a resume from the checkpoint of ``step`` in ``directory`` that holds a
    state this danlu cannot read (``problem`` says which), saying how to train instead."""
    return IncompatibleCheckpointError(
        f"cannot resume from the checkpoint of step {step} in {directory}: {problem}. To train "
        "this script from scratch, give it a new checkpoint_dir (DANLU_CHECKPOINT_DIR) or pass "
        "resume=False"
    )


@dataclass
class RestoredInfo:
    """What :func:`restore_state` hands back besides the objects it loaded into."""

    step: int
    data_state: dict[str, Any] | None
    metrics_history: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] | None = None


def _to_cpu_copy(obj: Any) -> Any:
    """Deep copy ``obj``; tensors become detached, contiguous CPU copies."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.device.type == "cpu":
            return t.clone(memory_format=torch.contiguous_format)
        return t.to("cpu", copy=True).contiguous()
    if isinstance(obj, dict):
        out = type(obj)() if type(obj) is not dict else {}
        for k, v in obj.items():
            out[k] = _to_cpu_copy(v)
        return out
    if isinstance(obj, list):
        return [_to_cpu_copy(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_to_cpu_copy(v) for v in obj)
    return copy.deepcopy(obj)


def _model_state(model: torch.nn.Module, copy: bool) -> Any:
    """``model.state_dict()``: all copies, or (``copy=False``) live parameters and copied
    buffers (the forward pass updates buffers such as BatchNorm's running statistics)."""
    if copy:
        return _to_cpu_copy(model.state_dict())
    live = model.state_dict(keep_vars=True)
    return {
        k: v.detach() if isinstance(v, torch.nn.Parameter) else _to_cpu_copy(v)
        for k, v in live.items()
    }


def capture_rng_state() -> dict[str, Any]:
    """The state of every global RNG, in JSON-safe or tensor form.

    CUDA generators are included only when CUDA is already initialised, so capturing never
    initialises CUDA as a side effect.
    """
    version, internal, gauss_next = random.getstate()
    np_state = np.random.get_state(legacy=False)
    assert isinstance(np_state, dict)
    state: dict[str, Any] = {
        "python": {
            "version": int(version),
            "internal": [int(x) for x in internal],
            "gauss_next": gauss_next,
        },
        "numpy": {
            "bit_generator": str(np_state["bit_generator"]),
            "key": torch.from_numpy(np.asarray(np_state["state"]["key"], dtype=np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state().clone(),
        "cuda": None,
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = [s.clone() for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Set every global RNG from a dict made by :func:`capture_rng_state`: all of them or,
    for a damaged state (a :class:`DataError`), none (:func:`parse_rng_state`)."""
    parse_rng_state(state)()


@dataclass(frozen=True)
class _RngLoad:
    """Checked RNG states (:func:`parse_rng_state`); calling it sets every global RNG."""

    python: tuple[Any, ...]
    numpy: dict[str, Any]
    torch_cpu: torch.Tensor
    cuda: list[torch.Tensor]

    def __call__(self) -> None:
        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch_cpu)
        if self.cuda:
            torch.cuda.set_rng_state_all(self.cuda)


def parse_rng_state(state: dict[str, Any]) -> Callable[[], None]:
    """Check RNG states made by :func:`capture_rng_state` and return what sets every global
    RNG from them, which does not fail. A damaged state (a field missing or of the wrong
    type, a generator state of another size or kind) is a :class:`DataError` saying what,
    before any generator is set: each state is first set on a scratch generator of its kind.
    CUDA states are set only where CUDA is available, on as many devices as both have; torch
    checks their size when CUDA starts (checking here would start it)."""
    try:
        py = state["python"]
        gauss_next = py["gauss_next"]
        if gauss_next is not None and not isinstance(gauss_next, float):
            raise TypeError(f"python's gauss_next is {type(gauss_next).__name__}, not a float")
        python = (int(py["version"]), tuple(int(x) for x in py["internal"]), gauss_next)
        random.Random().setstate(python)
        nps = state["numpy"]
        numpy = {
            "bit_generator": nps["bit_generator"],
            "state": {
                "key": np.asarray(torch.as_tensor(nps["key"]).numpy(), dtype=np.uint32),
                "pos": int(nps["pos"]),
            },
            "has_gauss": int(nps["has_gauss"]),
            "gauss": float(nps["gauss"]),
        }
        np.random.RandomState().set_state(numpy)
        torch_cpu = torch.as_tensor(state["torch"], dtype=torch.uint8).cpu()
        torch.Generator().set_state(torch_cpu)
        cuda: list[torch.Tensor] = []
        stored_cuda = state.get("cuda")
        if stored_cuda and torch.cuda.is_available():
            n = min(len(stored_cuda), torch.cuda.device_count())
            cuda = [torch.as_tensor(s, dtype=torch.uint8).cpu() for s in stored_cuda[:n]]
    except (KeyError, TypeError, ValueError, IndexError, OverflowError, RuntimeError) as exc:
        raise DataError(f"invalid RNG state in checkpoint: {exc}") from exc
    return _RngLoad(python, numpy, torch_cpu, cuda)


def capture_state(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    scaler: Any = None,
    *,
    data_state: dict[str, Any] | None = None,
    step: int = 0,
    metrics_history: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
    copy: bool = True,
    rng_ranks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Capture the full training state as a nested dict of CPU copies.

    Args:
        model: the module whose ``state_dict()`` is captured (unwrap DDP yourself or not:
            the keys are whatever ``model.state_dict()`` returns, and restore uses the same).
        optimizer: a ``torch.optim.Optimizer``; its ``state_dict()`` is captured.
        scheduler: an LR scheduler (anything with ``state_dict``/``load_state_dict``).
        scaler: a ``torch.amp.GradScaler`` (or anything with ``state_dict``).
        data_state: the data position (epoch, sampler state, offset); plain data and tensors.
        step: the number of optimizer steps completed.
        metrics_history: per-step or per-eval metric records.
        extra: anything else the caller wants back (plain data and tensors).
        copy: with False, the model's parameters and the optimizer's state are the live
            tensors (no copy): only for handing straight to ``CheckpointManager.save``,
            which snapshots them into reused host buffers — with ``async_save`` on CPU in
            its background thread, the optimizer's next ``step()`` waiting for the copy
            (``CapturedState.guards``). The fast path for async checkpoints (fresh CPU
            copies cost page faults; see ``benchmarks/checkpoint_stall.py``). Model
            buffers, RNG, scheduler and scaler states are copied either way.
        rng_ranks: a distributed run's RNG states, rank by rank (each rank's
            :func:`capture_rng_state`, gathered to the capturing rank): stored as
            ``rng_ranks`` for :func:`restore_state` to give each rank its own. ``rng`` is
            the capturing process's either way.

    Returns:
        A :class:`CapturedState` (a ``dict``) with keys ``version``, ``step``, ``model``,
        ``optimizer``, ``scheduler``, ``scaler``, ``rng``, ``data_state``,
        ``metrics_history``, ``extra``, ``optimizer_class`` and ``scheduler_class`` (the
        optimizer's and the scheduler's qualified class names, which
        :func:`check_compatible` compares; and ``rng_ranks`` when given). Every tensor
        is a private CPU copy (unless ``copy=False``).
    """
    opt_state: Any = None
    if optimizer is not None:
        opt_state = optimizer.state_dict()
        opt_state = _to_cpu_copy(opt_state) if copy else opt_state
    state = CapturedState(
        version=STATE_VERSION,
        step=int(step),
        model=_model_state(model, copy),
        optimizer=opt_state,
        scheduler=_to_cpu_copy(scheduler.state_dict()) if scheduler is not None else None,
        scaler=_to_cpu_copy(scaler.state_dict()) if scaler is not None else None,
        rng=capture_rng_state(),
        data_state=_to_cpu_copy(data_state) if data_state is not None else None,
        metrics_history=_to_cpu_copy(list(metrics_history or [])),
        extra=_to_cpu_copy(extra) if extra is not None else None,
        optimizer_class=_class_name(optimizer) if optimizer is not None else None,
        scheduler_class=_class_name(scheduler) if scheduler is not None else None,
    )
    if rng_ranks is not None:
        state["rng_ranks"] = _to_cpu_copy(list(rng_ranks))
    state.owned = copy
    if not copy and optimizer is not None:
        state.guards = (optimizer,)
    return state


def _class_name(obj: object) -> str:
    """``module.QualifiedName`` of ``obj``'s class."""
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a tensor (or of a value with one), else None."""
    shape = getattr(value, "shape", None)
    return tuple(int(n) for n in shape) if shape is not None else None


def _listed(names: list[str], limit: int = 3, sep: str = ", ") -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return sep.join(names[:limit]) + more


def _model_difference(saved: Any, model: torch.nn.Module) -> str | None:
    """What differs between a checkpoint's model state and ``model``'s, or None."""
    if not isinstance(saved, dict):
        return "the checkpoint's model entry is not a state dict"
    live = model.state_dict()
    missing = [k for k in live if k not in saved]
    unexpected = [k for k in saved if k not in live]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"the model has {_listed(missing)} that the checkpoint lacks")
        if unexpected:
            parts.append(f"the checkpoint has {_listed(unexpected)} that the model lacks")
        return "the model differs: " + "; ".join(parts)
    shapes = [
        f"{k} is {list(s_old)} in the checkpoint, {list(s_new)} now"
        for k, v in live.items()
        if (s_new := _shape(v)) is not None
        and (s_old := _shape(saved[k])) is not None
        and s_old != s_new
    ]
    if shapes:
        return "the model's shape differs: " + _listed(shapes, sep="; ")
    return None


_GROUP_KEYS_ANY = frozenset(("params", "param_names", "initial_lr"))
"""Parameter-group keys not owned by the optimizer's class (``initial_lr`` is an LR
scheduler's)."""


def _optimizer_difference(
    saved: Any, saved_class: Any, optimizer: torch.optim.Optimizer
) -> str | None:
    """What differs between a checkpoint's optimizer state and ``optimizer``, or None.

    The class is compared by name when the checkpoint records it (``optimizer_class``);
    an older checkpoint's by its parameter groups' hyper-parameter keys (SGD's
    ``momentum`` are not Adam's ``betas``)."""
    if not isinstance(saved, dict) or not isinstance(saved.get("param_groups"), list):
        return "the checkpoint's optimizer entry is not an optimizer state dict"
    now = _class_name(optimizer)
    if isinstance(saved_class, str) and saved_class != now:
        old_name, new_name = saved_class.rsplit(".", 1)[-1], now.rsplit(".", 1)[-1]
        return f"the optimizer differs: {old_name} in the checkpoint, {new_name} now"
    groups, live_groups = saved["param_groups"], optimizer.param_groups
    if len(groups) != len(live_groups):
        return (
            f"the optimizer has {len(live_groups)} parameter group(s), the checkpoint {len(groups)}"
        )
    for i, (old, new) in enumerate(zip(groups, live_groups, strict=True)):
        if not isinstance(old, dict):
            return f"the checkpoint's optimizer parameter group {i} is not a dict"
        n_old, n_new = len(old.get("params", ())), len(new["params"])
        if n_old != n_new:
            return (
                f"the optimizer's parameter group {i} holds {n_new} parameters, the "
                f"checkpoint's {n_old}"
            )
        foreign = sorted(set(old) - set(new) - _GROUP_KEYS_ANY)
        if foreign:
            return (
                f"the optimizer differs: the checkpoint's has the settings {_listed(foreign)}, "
                f"which {now.rsplit('.', 1)[-1]} does not have"
            )
    return None


def check_compatible(
    state: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    *,
    sampler: ElasticSampler | None = None,
    global_batch_size: int | None = None,
) -> None:
    """Raise :class:`IncompatibleCheckpointError` (a ``ConfigError`` and a ``DataError``)
    saying what differs when ``state`` was written by another model (parameter names or
    shapes) or another optimizer (its class, parameter groups, or their hyper-parameters),
    or without an optimizer or scheduler that is given now: loading it would fail deep
    inside torch (a size mismatch, Adam's ``KeyError: 'betas'`` at the first step), or
    train on wrongly.

    ``sampler``: the live :class:`~danlu.train.data.ElasticSampler` whose position the
    state's ``data_state["sampler"]`` holds (a :class:`~danlu.train.context.TrainContext`'s
    checkpoint): another dataset size, or another ``shuffle`` or ``drop_last`` in the
    middle of an epoch, is refused too (:meth:`ElasticSampler.resume_problem`).
    ``global_batch_size``: the one the script gives now; when the state's
    ``data_state["batch"]`` was written with another, a WARNING says that the checkpoint's
    is used (``BatchController.load_state_dict`` takes it)."""
    problem = _model_difference(state.get("model"), model)
    if problem is None and optimizer is not None and state.get("optimizer") is not None:
        problem = _optimizer_difference(state["optimizer"], state.get("optimizer_class"), optimizer)
    if problem is None and optimizer is not None and state.get("optimizer") is None:
        problem = "the checkpoint holds no optimizer state but an optimizer is given"
    if problem is None and scheduler is not None and state.get("scheduler") is None:
        problem = "the checkpoint was written without an LR scheduler, one is given now"
    if problem is None and scheduler is not None:
        problem = _scheduler_difference(state.get("scheduler_class"), scheduler)
    data_state = state.get("data_state")
    data = data_state if isinstance(data_state, dict) else {}
    if problem is None and sampler is not None and isinstance(data.get("sampler"), dict):
        problem = sampler.resume_problem(data["sampler"])
    if problem is not None:
        raise IncompatibleCheckpointError(problem)
    if scheduler is None and state.get("scheduler") is not None:
        was = state.get("scheduler_class") or "an LR scheduler"
        log.warning(
            "the checkpoint's LR scheduler (%s) is dropped: none is given now, so the "
            "learning rate stays where the optimizer's state left it",
            was,
        )
    if global_batch_size is not None and isinstance(data.get("batch"), dict):
        _note_global_batch(data["batch"], global_batch_size)


def _note_global_batch(saved: dict[str, Any], given: int) -> None:
    """WARN when the script's ``global_batch_size`` is not the one the checkpoint's run was
    given (its ``base_global_batch``; a checkpoint written before that was kept: its
    ``global_batch``). The checkpoint's is used: the resume goes on with its batch and the LR
    tuned for it (a batch an adaptive run grew to is kept as well)."""
    try:
        was = stored_count(saved.get("base_global_batch", saved.get("global_batch")), "it", 1)
    except ValueError:  # none kept, or a damaged one: the batch state's load refuses that
        return
    if was == given:
        return
    log.warning(
        "global_batch_size=%d differs from the checkpoint's global_batch_size=%d: %d is used, "
        "so the resumed run goes on as it was written (same batch, same LR); to train at %d, "
        "start over with a fresh checkpoint_dir or resume=False",
        given,
        was,
        was,
        given,
    )


def _scheduler_difference(recorded: Any, scheduler: Any) -> str | None:
    """What differs between the scheduler class the checkpoint recorded (None in one
    written before it was recorded: nothing to compare) and ``scheduler``'s."""
    now = _class_name(scheduler)
    if recorded is None or recorded == now:
        return None
    return (
        f"the LR scheduler differs: {recorded} in the checkpoint, {now} now (its state "
        "would be loaded into another schedule)"
    )


_SCALER_FIELDS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")
"""What an enabled ``torch.amp.GradScaler`` reads of its state."""


def _scaler_state(stored: Any, scaler: Any) -> Any:
    """The checkpoint's scaler state ``stored`` for the live ``scaler``, checked before
    anything is loaded: None where it holds none (no state, or a disabled GradScaler's empty
    one: written at another precision), else the state; a :class:`DataError` naming the
    field an enabled GradScaler would fail on (missing, no number, a scale that is not
    finite and positive). Another kind of scaler's state is its own to read."""
    if stored is None or (isinstance(stored, dict) and not stored):
        return None
    if not isinstance(scaler, torch.amp.GradScaler) or not scaler.is_enabled():
        return stored
    if not isinstance(stored, dict):
        raise DataError(f"the GradScaler state is a {type(stored).__name__}, not a dict")
    for name in _SCALER_FIELDS:
        value = stored.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DataError(f"the GradScaler state's {name!r} is {value!r}, not a number")
    if not (math.isfinite(stored["scale"]) and stored["scale"] > 0):
        raise DataError(f"the GradScaler state's 'scale' is {stored['scale']!r}, not > 0")
    return stored


def restore_state(
    state: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    scaler: Any = None,
    *,
    rank: int = 0,
    world_size: int = 1,
    sampler: ElasticSampler | None = None,
    global_batch_size: int | None = None,
) -> RestoredInfo:
    """Load a state made by :func:`capture_state` into live objects and set every RNG.

    Nothing is loaded unless the state fits: :func:`check_compatible` raises
    :class:`IncompatibleCheckpointError` saying what differs (another model shape or
    optimizer; a scheduler given now that the state lacks; given ``sampler``, another
    dataset size or, mid-epoch, another order; ``global_batch_size``: see there), nor
    when its ``step`` is not a whole number >= 0 (a damaged checkpoint). The
    ``sampler`` is not loaded here: its state is in the returned ``data_state``. The model
    is loaded strictly.
    Objects passed as None are skipped. A ``scaler`` given for a state written without one
    (an fp32 run resumed in fp16) starts fresh: a GradScaler's state is only its loss scale
    and growth counter, which it finds again within a few steps.

    The RNGs are set from the ``rank``-th of the state's ``rng_ranks`` when it holds one per
    rank of ``world_size``; else (another world size, a state of one process, or one written
    before ``rng_ranks`` existed) from ``rng``, the capturing process's.

    Returns:
        The step, data position, metric history and ``extra`` stored in the state.
    """
    if not isinstance(state, dict) or "model" not in state:
        raise DataError("not a danlu training state (no 'model' entry)")
    version = state.get("version", STATE_VERSION)
    if version != STATE_VERSION:
        raise DataError(f"unsupported training-state version {version!r}")
    try:  # before anything is loaded; int() read 2.5 as step 2 and "abc" as a bare error
        step = stored_count(state.get("step", 0), "the training state's step")
    except ValueError as exc:
        raise IncompatibleCheckpointError(f"{exc} (the checkpoint is damaged)") from None
    check_compatible(
        state, model, optimizer, scheduler, sampler=sampler, global_batch_size=global_batch_size
    )
    rng = state.get("rng")
    per_rank = state.get("rng_ranks")
    if isinstance(per_rank, list) and len(per_rank) == world_size and 0 <= rank < world_size:
        rng = per_rank[rank]
    try:  # before anything is loaded
        set_rng = None if rng is None else parse_rng_state(rng)
        scaler_state = None if scaler is None else _scaler_state(state.get("scaler"), scaler)
    except DataError as exc:
        raise IncompatibleCheckpointError(f"{exc} (the checkpoint is damaged)") from None
    model.load_state_dict(state["model"])
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler)):
        if obj is not None:  # check_compatible: the state holds one
            obj.load_state_dict(state[name])
    if scaler is not None and scaler_state is None:
        log.warning(
            "the checkpoint holds no GradScaler state (written at another precision): "
            "the loss scale starts fresh"
        )
    elif scaler is not None:
        scaler.load_state_dict(scaler_state)
    if set_rng is not None:
        set_rng()
    return RestoredInfo(
        step=step,
        data_state=state.get("data_state"),
        metrics_history=list(state.get("metrics_history") or []),
        extra=state.get("extra"),
    )
