"""Projects' recent usage: the decay weight of a stretch on GPUs, the simulator's running
totals, and the weights' checks."""

from __future__ import annotations

import math

import pytest

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.project_usage import (
    MAX_WEIGHT,
    MIN_WEIGHT,
    DecayingUsage,
    ProjectShare,
    add_stretch,
    shares_with_usage,
    stretch_weight,
    usage_half_life,
)
from danlu.sched.view import ClusterView, JobRequest, JobStatus


def test_a_stretch_over_all_the_past_weighs_one_and_halves_each_half_life() -> None:
    assert stretch_weight(0.0, 1e6, 1e6, 100.0) == pytest.approx(1.0)
    # the same stretch, ended one half-life ago, then two
    assert stretch_weight(0.0, 1e6, 1e6 + 100.0, 100.0) == pytest.approx(0.5)
    assert stretch_weight(0.0, 1e6, 1e6 + 200.0, 100.0) == pytest.approx(0.25)
    assert stretch_weight(50.0, 50.0, 80.0, 100.0) == 0.0  # empty


def test_the_weight_is_the_normalised_integral_of_the_decay() -> None:
    start, end, now, half_life = 1000.0, 4000.0, 9000.0, 2500.0
    steps = 30_000
    width = (end - start) / steps
    integral = sum(
        2 ** (-(now - (start + (i + 0.5) * width)) / half_life) * width for i in range(steps)
    )
    expected = integral / (half_life / math.log(2))
    assert stretch_weight(start, end, now, half_life) == pytest.approx(expected, rel=1e-6)


def test_running_totals_match_the_direct_sum_in_any_order_of_ends() -> None:
    stretches = [("a", 1000, 0.0, 500.0), ("b", 500, 100.0, 900.0), ("a", 2000, 300.0, 700.0)]
    now, half_life = 1500.0, 400.0
    direct: dict[str, float] = {}
    for project, milli, start, end in stretches:
        weight = stretch_weight(start, end, now, half_life)
        direct[project] = direct.get(project, 0.0) + milli * weight
    for order in (stretches, stretches[::-1]):
        totals = DecayingUsage(half_life)
        for project, milli, start, end in order:
            totals.add(project, milli, start, end)
        assert totals.at(now) == pytest.approx(direct)
    later = DecayingUsage(half_life)
    for stretch in stretches:
        later.add(*stretch)
    assert later.at(now + half_life) == pytest.approx({p: v / 2 for p, v in direct.items()})


def test_weights_and_usage_are_checked() -> None:
    with pytest.raises(ConfigError, match="weight must be above 0"):
        ProjectShare(weight=0.0)
    with pytest.raises(ConfigError, match="weight must be above 0"):
        ProjectShare(weight=math.inf)
    with pytest.raises(ConfigError, match="recent usage"):
        ProjectShare(recent_milli=-1.0)
    with pytest.raises(ConfigError, match="half_life"):
        DecayingUsage(0.0)
    with pytest.raises(ConfigError, match="half_life"):
        stretch_weight(0.0, 1.0, 1.0, -5.0)
    assert shares_with_usage({"a": 2.0}, {"b": 300.0}) == {
        "a": ProjectShare(2.0, 0.0),
        "b": ProjectShare(1.0, 300.0),
    }


@pytest.mark.parametrize("half_life", [math.nan, math.inf, -math.inf])
def test_a_half_life_that_is_not_a_finite_positive_number_is_refused(half_life: float) -> None:
    """NaN passed the old ``<= 0`` test and made every project's recent usage NaN."""
    with pytest.raises(ConfigError, match="finite number of seconds above 0"):
        DecayingUsage(half_life)
    with pytest.raises(ConfigError, match="finite number of seconds above 0"):
        stretch_weight(0.0, 1.0, 2.0, half_life)
    totals: dict[str, float] = {}
    with pytest.raises(ConfigError, match="half_life"):
        add_stretch(totals, "a", 1000.0, 0.0, 1.0, 2.0, half_life)
    assert totals == {}


def test_a_policy_asks_for_history_with_usage_half_life() -> None:
    assert usage_half_life(FairSharePolicy()) == 0.0
    assert usage_half_life(FairSharePolicy(half_life=3600.0)) == 3600.0
    assert usage_half_life(object()) == 0.0
    with pytest.raises(ConfigError, match="half_life"):
        FairSharePolicy(half_life=-1.0)


def test_a_weight_stored_outside_the_bounds_is_read_as_the_nearest_bound() -> None:
    """A project stored before the control plane bounded weights may hold 1e-320: divided
    by it, every standing of a project holding a GPU overflowed to inf, so two such projects
    stood level whatever they held and the older head always went first (a took 5 of 6)."""
    assert ProjectShare(weight=1e-320).weight == MIN_WEIGHT
    assert ProjectShare(weight=1e300).weight == MAX_WEIGHT
    assert ProjectShare(weight=2.5).weight == 2.5
    pending = tuple(
        JobStatus(JobRequest(id=f"{p}{i}", submit_time=0.0, gpus=1, seq=s + i, project=p))
        for p, s in (("a", 0), ("b", 10))
        for i in range(6)
    )
    tiny = {"a": ProjectShare(weight=1e-320), "b": ProjectShare(weight=1e-320)}
    view = ClusterView(0.0, Cluster.homogeneous(1, 6), pending=pending, projects=tiny)
    plan = FairSharePolicy().schedule(view)
    assert sorted(s.job_id for s in plan.starts) == ["a0", "a1", "a2", "b0", "b1", "b2"]
