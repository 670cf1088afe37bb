"""A whole number past a float's range as a policy option (``--option min_run=1000...0``:
JSON keeps hundreds of digits exactly) is a :class:`ConfigError` naming the option, not an
``OverflowError`` from the range check (or, for an option without an upper bound, from the
first round's float arithmetic)."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import ConfigError
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.policies.tiresias import TiresiasPolicy
from danlu.sched.registry import make_policy

HUGE = 10**400


@pytest.mark.parametrize(
    ("policy", "option", "value"),
    [
        ("tiresias", "thresholds", (3600, HUGE)),
        ("tiresias", "starvation_min", HUGE),
        ("tiresias", "starvation_factor", HUGE),
        ("fair-share", "min_run", HUGE),
        ("fair-share", "half_life", HUGE),
        ("priority", "aging_per_hour", HUGE),
        ("value-density", "restart_cost", HUGE),
        ("value-density", "priority_scale", HUGE),
        ("optimus", "restart_cost", HUGE),
        ("pollux", "seed", HUGE),
        ("pollux", "seed", -HUGE),
        ("pollux", "population", HUGE),
        ("danlu", "restart_cost", HUGE),
    ],
    ids=lambda v: v if isinstance(v, str) else "huge",
)
def test_a_number_past_a_float_is_a_config_error(policy: str, option: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"{policy} policy: .*{option} must be in") as caught:
        make_policy(policy, **{option: value})
    message = str(caught.value)
    assert "at most 1.8e+308" in message
    assert "(401 digits)" in message  # abbreviated, not 401 digits long
    assert len(message) < 200


def test_direct_construction_refuses_it_too() -> None:
    with pytest.raises(ConfigError, match="min_run"):
        FairSharePolicy(min_run=HUGE)
    with pytest.raises(ConfigError, match="thresholds"):
        TiresiasPolicy(thresholds=(HUGE,))


def test_large_numbers_within_a_float_still_build() -> None:
    policy = make_policy("fair-share", min_run=10**300)
    assert policy.min_run == 10**300  # type: ignore[attr-defined]
    assert make_policy("pollux", seed=2**70).seed == 2**70  # type: ignore[attr-defined]


def test_small_values_keep_their_message() -> None:
    with pytest.raises(ConfigError, match=r"must be in \[0, inf\), got -1 \(default 300.0\)$"):
        make_policy("fair-share", min_run=-1)
    with pytest.raises(ConfigError, match=r"got \(3600, -5\) \(default \(57600.0,\)\)$"):
        make_policy("tiresias", thresholds=(3600, -5))
