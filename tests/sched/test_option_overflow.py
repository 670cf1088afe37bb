"""A whole number past a float's range as a policy option (``--option min_run=1000...0``:
JSON keeps hundreds of digits exactly) is a :class:`ConfigError` naming the option, not an
``OverflowError`` from the range check (or, for an option without an upper bound, from the
first round's float arithmetic)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from danlu.core.errors import ConfigError
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.policies.tiresias import TiresiasPolicy
from danlu.sched.policies.value_density import ValueDensityPolicy
from danlu.sched.registry import make_policy
from danlu.sched.view import JobRequest, JobStatus

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


def test_value_density_ranks_by_a_number_at_extreme_options() -> None:
    """A subnormal priority_scale makes the priority term infinite, and a 1e308 s default
    duration on 8 GPUs made the time term infinite too: the key was NaN, which sorts
    nowhere in particular. Each term is finite or signed-infinite on its own now."""
    policy = make_policy("value-density", priority_scale=5e-324, default_duration=1e308)
    assert isinstance(policy, ValueDensityPolicy)
    high, low, zero = (
        JobStatus(JobRequest(id=name, submit_time=0.0, gpus=8, priority=priority))
        for name, priority in (("high", 1_000_000), ("low", -1_000_000), ("zero", 0))
    )
    logs = [policy.log_density(job, 0.0) for job in (high, low, zero)]
    assert not any(math.isnan(log) for log in logs)
    assert logs[0] > logs[2] > logs[1]
    assert policy.density(high, 0.0) == math.inf
    assert policy.density(low, 0.0) == 0.0
    ranked = sorted((high, low, zero), key=lambda job: policy.rank_key(job, 0.0)[0])
    assert [job.id for job in ranked] == ["high", "zero", "low"]
