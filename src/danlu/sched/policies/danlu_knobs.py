"""The valid ranges of :class:`~danlu.sched.policies.danlu.DanluPolicy`'s numeric knobs,
checked with every knob's declared type when a policy is built
(:func:`~danlu.sched.policies.options.check_options`): a value outside them raises
:class:`~danlu.core.errors.ConfigError` naming the knob, what it accepts and its default
(``alloc`` is checked by the policy itself)."""

from __future__ import annotations

from danlu.sched.policies.options import INF, OptionRange

KNOB_RANGES: dict[str, OptionRange] = {
    "restart_cost": (0.0, INF, (True, False)),
    "hysteresis": (0.0, 1.0, (True, False)),
    "min_hold": (0.0, INF, (True, False)),
    "move_slack": (0.0, INF, (False, False)),
    "max_moves": (1, INF, (True, False)),
    "rank_hysteresis": (0.0, 1.0, (True, False)),
    "price_scale": (0.0, INF, (True, False)),
    "regret": (1.0, INF, (True, False)),
    "width": (0.0, INF, (True, False)),
    "grow_after": (0.0, INF, (True, False)),
    "aging": (0.0, INF, (False, False)),
    "starve_after": (0.0, INF, (True, False)),
    "starve_share": (0.0, 1.0, (False, True)),
    "starve_hold": (0.0, INF, (True, False)),
    "move_budget": (0, INF, (True, False)),
    "new_job_seconds": (0.0, INF, (False, False)),
    "explore_after": (0.0, INF, (True, False)),
    "first_gpus": (0, INF, (True, False)),
    "grow_factor": (1.0, INF, (True, False)),
    "spare_gain": (0.0, INF, (True, False)),
    "share_p_max": (0.05, 1.0, (True, True)),
    "loan_weight": (0.0, 1.0, (True, True)),
    "loan_margin": (0.0, INF, (True, False)),
    "share_min_gain": (0.0, INF, (True, False)),
    "share_min_rate": (0.0, 1.0, (True, True)),
}
"""Each numeric knob's valid range: (low, high, (low included, high included))."""
