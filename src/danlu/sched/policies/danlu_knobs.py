"""The value checks of :class:`~danlu.sched.policies.danlu.DanluPolicy`'s knobs: every
knob's declared type (:func:`~danlu.sched.policies.options.check_option_type`, as the
registry checks options by name) and each numeric knob's valid range. A policy built with a
value outside them raises :class:`~danlu.core.errors.ConfigError` naming the knob, what it
accepts and, for a range, its default (``alloc`` is checked by the policy itself)."""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

from danlu.core.errors import ConfigError
from danlu.sched.policies.options import check_option_type

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


def check_knobs(policy: Any) -> None:
    """Raise :class:`ConfigError` for the first knob of ``policy`` (a ``DanluPolicy``) whose
    value has the wrong type or lies outside its range."""
    hints = typing.get_type_hints(type(policy))
    defaults = {}
    for f in dataclasses.fields(policy):
        if f.init:
            check_option_type(policy.name, f.name, getattr(policy, f.name), hints[f.name])
            defaults[f.name] = f.default
    for knob, (low, high, closed) in _KNOB_RANGES.items():
        value = getattr(policy, knob)
        above = value >= low if closed[0] else value > low
        below = value <= high if closed[1] else value < high
        if not (above and below and math.isfinite(value)):
            span = f"{'[' if closed[0] else '('}{low:g}, {high:g}{']' if closed[1] else ')'}"
            raise ConfigError(
                f"danlu policy: {knob} must be in {span}, got {value!r} "
                f"(default {defaults[knob]!r})"
            )
