"""The checks of :func:`danlu.train.init`'s arguments: a value that cannot work is a
:class:`~danlu.core.errors.ConfigError` naming the argument when the job starts, not a
failure hours later (an unknown ``lr_scaling`` rule raised at the first batch change) or a
run that silently trains wrong (a negative ``clip_grad_norm`` or ``grad_norm_tau`` turns the
step around)."""

from __future__ import annotations

import math
import os
from numbers import Integral, Real
from typing import Any, Literal

import numpy as np
import torch

from danlu.core.errors import ConfigError
from danlu.train.anomaly import MIN_HISTORY
from danlu.train.scaling import normalised_rule, rule_names

WHY = {
    "anomaly_window": (
        ": the spike limit mu + k sigma is set once the window holds "
        f"{MIN_HISTORY} healthy values (a shorter window left spike detection off)"
    ),
}
"""Why a lower bound is what it is, for the error's message."""
BEST_MODES = ("min", "max")
"""The spellings of ``best_mode`` (in any case, blanks around them ignored)."""


def whole_argument(name: str, value: object, least: int | None) -> int:
    """``value``, the argument ``name``, when it is an integer (not a bool, not ``2.5``, a
    NaN or ``"8"``) of at least ``least`` (None: of any sign, a seed); else a
    :class:`ConfigError` naming it."""
    if not isinstance(value, Integral) or isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer (got {value!r})")
    if least is not None and value < least:
        raise ConfigError(f"{name} must be >= {least} (got {value})")
    return int(value)


def flag_argument(name: str, value: object) -> bool:
    """``value``, the switch ``name``, as a bool: True or False (NumPy's too) or the
    integers 0 and 1, as the anomaly guard's ``check_loss_spikes``; anything else is a
    :class:`ConfigError` naming it (``bool("no")`` and ``bool("False")`` are True: such a
    switch was on when asked off)."""
    if isinstance(value, bool | np.bool_) or (isinstance(value, Integral) and value in (0, 1)):
        return bool(value)
    raise ConfigError(f"{name} must be True or False (got {value!r})")


def positive_argument(name: str, value: object) -> float:
    """``value``, the argument ``name``, when it is a positive, finite number (not a bool,
    not a string); else a :class:`ConfigError` naming it."""
    if not isinstance(value, Real) or isinstance(value, bool):
        raise ConfigError(f"{name} must be a number (got {value!r})")
    try:
        number = float(value)
    except OverflowError:  # an int past the float range (10**400): no finite number
        number = math.inf
    if not 0 < number < math.inf:
        raise ConfigError(f"{name} must be a positive, finite number (got {value})")
    return number


def normalised_best_mode(mode: object, name: str = "best_mode") -> Literal["min", "max"]:
    """``mode`` as ``"min"`` or ``"max"``: case and surrounding blanks do not matter
    (``"MAX"``, ``" max "``), as for the precision's and the anomaly action's names; anything
    else is a :class:`ConfigError` naming the argument ``name`` and the accepted spellings."""
    spelled = mode.strip().lower() if isinstance(mode, str) else None
    if spelled == "min":
        return "min"
    if spelled == "max":
        return "max"
    raise ConfigError(f"{name} must be one of {', '.join(BEST_MODES)} (in any case); got {mode!r}")


def check_init_args(
    *,
    micro_batch_size: int | None,
    warmup_steps: int,
    grad_norm_tau: float | None,
    clip_grad_norm: float | None,
    anomaly_k: float,
    anomaly_window: int,
    lr_scaling: str,
    gns_every: int,
    checkpoint_every_steps: int | None,
    checkpoint_every_seconds: float | None,
    keep_last: int,
    keep_best: int = 1,
    best_mode: str = "min",
    report_interval_s: float,
    collective_timeout_s: float,
    dataset_size: int | None = None,
    global_batch_size: int | None = None,
    checkpoint_dir: object = None,
    metrics_file: object = None,
    shuffle: object = True,
    drop_last: object = False,
    seed: object = 0,
    async_checkpoint: object = False,
    incremental_checkpoint: object = False,
    resume: object = True,
) -> None:
    """Raise :class:`ConfigError` for the first argument out of its range or of the wrong
    type: a count must be an integer (not a bool, not ``2.5`` or ``"8"``, which failed deep
    inside the sampler or trained with fractional batches), a rate or limit a real number,
    a ``checkpoint_dir`` or ``metrics_file`` path not only blanks (it named a directory or
    file of blanks; as ``DANLU_CHECKPOINT_DIR`` and ``DANLU_METRICS_FILE`` are refused).
    The sampler's ``shuffle``, ``drop_last`` (switches) and ``seed`` (an integer) are checked
    here too, with or without a ``dataset_size``: without one the sampler is built only by
    the first ``ctx.batches`` (from ``len(dataset)``), and a ``shuffle="no"`` went unnoticed
    until then. So are the
    switches ``async_checkpoint``, ``incremental_checkpoint`` and ``resume`` (``"no"`` was
    true: ``resume="no"`` resumed)."""
    whole_argument("seed", seed, None)
    switches = (
        ("shuffle", shuffle),
        ("drop_last", drop_last),
        ("async_checkpoint", async_checkpoint),
        ("incremental_checkpoint", incremental_checkpoint),
        ("resume", resume),
    )
    for switch, value in switches:
        flag_argument(switch, value)
    for name, path in (("checkpoint_dir", checkpoint_dir), ("metrics_file", metrics_file)):
        if isinstance(path, str) and path and not path.strip():
            raise ConfigError(f"{name}={path!r} is only whitespace; pass None or a path")
    counts: list[tuple[str, object]] = [
        ("global_batch_size", global_batch_size),
        ("micro_batch_size", micro_batch_size),
        ("dataset_size", dataset_size),
        ("warmup_steps", warmup_steps),
        ("anomaly_window", anomaly_window),
        ("gns_every", gns_every),
        ("checkpoint_every_steps", checkpoint_every_steps),
        ("keep_last", keep_last),
        ("keep_best", keep_best),
    ]
    for name, count in counts:
        if count is not None and (not isinstance(count, Integral) or isinstance(count, bool)):
            raise ConfigError(f"{name} must be an integer (got {count!r})")
    if global_batch_size is not None and global_batch_size < 1:
        raise ConfigError(f"global_batch_size must be >= 1 (got {global_batch_size})")
    if dataset_size is not None and dataset_size < 1:
        raise ConfigError(
            f"the dataset is empty (dataset_size={dataset_size}): there is nothing to train on"
        )
    at_least: list[tuple[str, float | None, float]] = [
        ("micro_batch_size", micro_batch_size, 1),
        ("warmup_steps", warmup_steps, 0),
        ("anomaly_window", anomaly_window, MIN_HISTORY),
        ("gns_every", gns_every, 0),
        ("checkpoint_every_steps", checkpoint_every_steps, 1),
        ("keep_last", keep_last, 1),
        ("keep_best", keep_best, 0),
    ]
    for name, value, low in at_least:
        if value is not None and value < low:
            why = WHY.get(name, "")
            raise ConfigError(f"{name} must be >= {low:g} (got {value}){why}")
    positive: list[tuple[str, float | None]] = [
        ("grad_norm_tau", grad_norm_tau),
        ("clip_grad_norm", clip_grad_norm),
        ("anomaly_k", anomaly_k),
        ("checkpoint_every_seconds", checkpoint_every_seconds),
        ("report_interval_s", report_interval_s),
        ("collective_timeout_s", collective_timeout_s),
    ]
    for name, number in positive:
        if number is not None:
            positive_argument(name, number)
    normalised_best_mode(best_mode)
    rules = ["none", *rule_names()]
    if normalised_rule(lr_scaling) not in rules:
        raise ConfigError(f"lr_scaling must be one of {', '.join(rules)} (got {lr_scaling!r})")


def _kind(value: object) -> str:
    """How an error names what was given: ``None``, or ``an object of type <name>``."""
    return "None" if value is None else f"an object of type {type(value).__name__}"


def _is_optimizer(value: object) -> bool:
    """True for a torch optimizer, or an object used as one: its ``param_groups`` a list
    and ``step``, ``zero_grad``, ``state_dict`` and ``load_state_dict`` callable (a wrapper
    that does not subclass :class:`torch.optim.Optimizer`)."""
    if isinstance(value, torch.optim.Optimizer):
        return True
    methods = ("step", "zero_grad", "state_dict", "load_state_dict")
    return isinstance(getattr(value, "param_groups", None), list) and all(
        callable(getattr(value, name, None)) for name in methods
    )


def check_training_objects(model: object, optimizer: object, scheduler: object) -> None:
    """Raise :class:`ConfigError`, naming the argument and the fix, when ``init``'s
    ``model``, ``optimizer`` or ``scheduler`` cannot be what it names. Before, a model and
    optimizer passed in each other's place, or a list of optimizers, failed with a bare
    ``AttributeError`` (``'SGD' object has no attribute 'to'``); and three mistakes trained
    wrong, silently: an optimizer passed as the scheduler was stepped twice a step, an
    optimizer built from another model's parameters (the model made again after it) left
    the model untrained, and a scheduler of another optimizer set that one's LRs, not the
    LRs of the optimizer that trains."""
    if not isinstance(model, torch.nn.Module):
        swapped = _is_optimizer(model) and isinstance(optimizer, torch.nn.Module)
        hint = (
            "the model and the optimizer are swapped: pass init(model, optimizer, ...)"
            if swapped
            else "pass the network (a torch.nn.Module) as the first argument"
        )
        raise ConfigError(f"model must be a torch.nn.Module, got {_kind(model)}: {hint}")
    if not _is_optimizer(optimizer):
        hint = (
            "pass one optimizer over all the parameters (its parameter groups may give "
            "parts their own settings)"
            if isinstance(optimizer, list | tuple)
            else "pass a torch.optim.Optimizer built from model.parameters()"
        )
        raise ConfigError(
            f"optimizer must be a torch.optim.Optimizer, got {_kind(optimizer)}: {hint}"
        )
    trained = {id(p) for p in model.parameters() if p.requires_grad}
    groups: list[dict[str, Any]] = optimizer.param_groups  # type: ignore[attr-defined]
    if trained and not any(id(p) in trained for g in groups for p in g.get("params", ())):
        raise ConfigError(
            f"the optimizer holds none of the model's parameters ({type(model).__name__}): "
            "it was built from another model's (the model made again after it?), and "
            "would leave this one untrained; build the optimizer from this model's "
            "parameters (torch.optim.SGD(model.parameters(), ...)) after the model is made"
        )
    if scheduler is None:
        return
    if _is_optimizer(scheduler) or isinstance(scheduler, torch.nn.Module):
        raise ConfigError(
            f"scheduler must be an LR scheduler (torch.optim.lr_scheduler), got "
            f"{_kind(scheduler)}: init's third argument is the scheduler "
            "(init(model, optimizer, scheduler, ...)); leave it out for none"
        )
    methods = ("step", "state_dict", "load_state_dict")
    missing = [name for name in methods if not callable(getattr(scheduler, name, None))]
    if missing:
        raise ConfigError(
            f"scheduler must be an LR scheduler (torch.optim.lr_scheduler), got "
            f"{_kind(scheduler)} without {', '.join(missing)}()"
        )
    driven = getattr(scheduler, "optimizer", None)
    if _is_optimizer(driven) and not _same_groups(driven.param_groups, groups):  # type: ignore[union-attr]
        raise ConfigError(
            f"the scheduler ({type(scheduler).__name__}) sets the LRs of another optimizer "
            f"than the one passed to init ({type(optimizer).__name__}), so its schedule "
            "would never reach the training; build the scheduler on that optimizer "
            "(torch.optim.lr_scheduler.StepLR(optimizer, ...))"
        )


def _same_groups(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    """Whether two optimizers' ``param_groups`` are the same groups: one list, or lists of
    the same group dicts (a wrapper that hands out its inner optimizer's groups in a list of
    its own), whose LRs a scheduler of either sets."""
    if mine is theirs:
        return True
    return len(mine) == len(theirs) and all(a is b for a, b in zip(mine, theirs, strict=True))


def checkpoint_directory(checkpoint_dir: object) -> str | None:
    """``init``'s ``checkpoint_dir`` as the string the checkpoints take: a path or URL
    string as it is, a ``pathlib.Path`` (any ``os.PathLike`` of text) as its string, None
    as None. Anything else (bytes, a number) is a :class:`ConfigError` naming it: a ``Path``
    failed with a bare ``TypeError`` (``'PosixPath' object is not subscriptable``)."""
    if checkpoint_dir is None or isinstance(checkpoint_dir, str):
        return checkpoint_dir
    if isinstance(checkpoint_dir, os.PathLike):
        path = os.fspath(checkpoint_dir)
        if isinstance(path, str):
            return path
    raise ConfigError(
        f"checkpoint_dir must be a path (a str or pathlib.Path) or a file:// or s3:// URL, "
        f"got {_kind(checkpoint_dir)} ({checkpoint_dir!r})"
    )
