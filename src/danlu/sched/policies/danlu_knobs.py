"""The value checks of :class:`~danlu.sched.policies.danlu.DanluPolicy`'s knobs: each
numeric knob's valid range, the whole-number and true/false knobs. A policy built with a
value outside them raises :class:`~danlu.core.errors.ConfigError` naming the knob, what it
accepts and its default (``alloc`` is checked by the policy itself)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from danlu.core.errors import ConfigError

_INF = math.inf
_KNOB_RANGES: dict[str, tuple[float, float, tuple[bool, bool]]] = {
    "restart_cost": (0.0, _INF, (True, False)),
    "hysteresis": (0.0, 1.0, (True, False)),
    "min_hold": (0.0, _INF, (True, False)),
    "move_slack": (0.0, _INF, (False, False)),
    "max_moves": (1, _INF, (True, False)),
    "rank_hysteresis": (0.0, 1.0, (True, False)),
    "price_scale": (0.0, _INF, (True, False)),
    "regret": (1.0, _INF, (True, False)),
    "width": (0.0, _INF, (True, False)),
    "grow_after": (0.0, _INF, (True, False)),
    "aging": (0.0, _INF, (False, False)),
    "starve_after": (0.0, _INF, (True, False)),
    "starve_share": (0.0, 1.0, (False, True)),
    "new_job_seconds": (0.0, _INF, (False, False)),
    "explore_after": (0.0, _INF, (True, False)),
    "first_gpus": (0, _INF, (True, False)),
    "grow_factor": (1.0, _INF, (True, False)),
    "spare_gain": (0.0, _INF, (True, False)),
    "share_p_max": (0.05, 1.0, (True, True)),
    "loan_weight": (0.0, 1.0, (True, True)),
    "loan_margin": (0.0, _INF, (True, False)),
}
"""Each numeric knob's valid range: (low, high, (low included, high included))."""
_BOOL_KNOBS = ("lend", "flat_sync", "share_measured", "loan_rule", "loan_all", "adaptive_jobs")


def check_knobs(policy: Any) -> None:
    """Raise :class:`ConfigError` for the first knob of ``policy`` (a ``DanluPolicy``) whose
    value has the wrong type or lies outside its range."""
    defaults = {f.name: f.default for f in dataclasses.fields(policy)}
    for knob, (low, high, closed) in _KNOB_RANGES.items():
        value = getattr(policy, knob)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"danlu policy: {knob} must be a number, got {value!r}")
        above = value >= low if closed[0] else value > low
        below = value <= high if closed[1] else value < high
        if not (above and below and math.isfinite(value)):
            span = f"{'[' if closed[0] else '('}{low:g}, {high:g}{']' if closed[1] else ')'}"
            raise ConfigError(
                f"danlu policy: {knob} must be in {span}, got {value!r} "
                f"(default {defaults[knob]!r})"
            )
    for knob in ("max_moves", "first_gpus"):
        if not isinstance(getattr(policy, knob), int):
            raise ConfigError(
                f"danlu policy: {knob} must be a whole number, got {getattr(policy, knob)!r}"
            )
    for knob in _BOOL_KNOBS:
        if not isinstance(getattr(policy, knob), bool):
            raise ConfigError(
                f"danlu policy: {knob} must be true or false, got {getattr(policy, knob)!r}"
            )
