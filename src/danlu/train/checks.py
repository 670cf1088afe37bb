"""The checks of :func:`danlu.train.init`'s arguments: a value that cannot work is a
:class:`~danlu.core.errors.ConfigError` naming the argument when the job starts, not a
failure hours later (an unknown ``lr_scaling`` rule raised at the first batch change) or a
run that silently trains wrong (a negative ``clip_grad_norm`` or ``grad_norm_tau`` turns the
step around)."""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Literal

import numpy as np

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
