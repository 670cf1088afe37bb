"""A report of the objective whose value is not a number (NaN, an infinity: a diverged trial)
still advances the trial's latest step, with its best unchanged, so that the median rule
judges the trial at the step it really reached. A trial with no finite report
ranks worse than every value."""

from __future__ import annotations

import math

import pytest

from danlu.core.sweep import EarlyStopping
from danlu.sched.sweep import curve, median_stop

RULE = EarlyStopping(rule="median", min_steps=5, min_trials=2)
NON_FINITE = [
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="minus-inf"),
]


def _good() -> list[tuple[int, float]]:
    return [(step, 2.0 - 0.006 * step) for step in range(301)]


def _diverged(bad: float, last: int = 94) -> list[tuple[int, float]]:
    """1.5 for steps 0..10, then ``bad`` up to ``last``."""
    return [(step, 1.5 if step <= 10 else bad) for step in range(last + 1)]


@pytest.mark.parametrize("bad", NON_FINITE)
def test_a_non_finite_report_advances_the_latest_step_and_keeps_the_best(bad: float) -> None:
    c = curve(_diverged(bad), "minimize")
    assert c.last_step == 94
    assert c.best_by(94) == 1.5
    assert c.best_by(10) == 1.5
    assert all(math.isfinite(b) for b in c.best)  # -inf never becomes the best


@pytest.mark.parametrize("bad", NON_FINITE)
def test_a_diverged_trial_is_judged_at_its_real_step(bad: float) -> None:
    peers = [curve(_good(), "minimize"), curve(_good(), "minimize")]
    reason = median_stop(RULE, curve(_diverged(bad), "minimize"), peers, "minimize")
    assert reason == (
        "stopped early: best 1.5 by step 94 is worse than the median 1.436 of 2 other trials "
        "by that step"
    )


def test_a_diverged_trial_is_judged_at_its_real_step_when_maximising() -> None:
    up = [curve([(s, 0.1 * s) for s in range(31)], "maximize")] * 2
    low = curve([(10, 0.5), (20, math.nan), (30, math.nan)], "maximize")
    assert low.last_step == 30
    reason = median_stop(RULE, low, up, "maximize")
    assert reason == (
        "stopped early: best 0.5 by step 30 is worse than the median 3 of 2 other trials by "
        "that step"
    )


@pytest.mark.parametrize("bad", NON_FINITE)
def test_a_trial_with_no_finite_report_is_worse_than_every_peer(bad: float) -> None:
    only_bad = curve([(step, bad) for step in range(21)], "minimize")
    assert only_bad.last_step == 20
    assert only_bad.best_by(20) == math.inf  # worse than any value
    peers = [curve([(10, 50.0), (20, 40.0)], "minimize"), curve([(20, 1e300)], "minimize")]
    reason = median_stop(RULE, only_bad, peers, "minimize")
    assert reason == (
        "stopped early: no finite value by step 20 (NaN or infinite: diverged), worse than "
        "the median 5e+299 of 2 other trials by that step"
    )


def test_a_maximised_trial_with_no_finite_report_is_stopped_too() -> None:
    only_bad = curve([(10, math.inf), (20, math.nan)], "maximize")
    peers = [curve([(20, -5.0)], "maximize"), curve([(20, -7.0)], "maximize")]
    reason = median_stop(RULE, only_bad, peers, "maximize")
    assert reason == (
        "stopped early: no finite value by step 20 (NaN or infinite: diverged), worse than "
        "the median -6 of 2 other trials by that step"
    )


def test_a_peer_with_no_finite_report_counts_as_worse_than_every_value() -> None:
    nan_peer = curve([(step, math.nan) for step in range(21)], "minimize")
    behind = curve([(10, 1.0), (20, 0.9)], "minimize")
    good = curve([(10, 0.5), (20, 0.4)], "minimize")
    fair = curve([(10, 0.7), (20, 0.6)], "minimize")
    # with the diverged peer the median of {0.4, inf} is inf: the trial is not behind it
    assert median_stop(RULE, behind, [good, nan_peer], "minimize") is None
    reason = median_stop(RULE, behind, [good, fair, nan_peer], "minimize")
    assert reason == (
        "stopped early: best 0.9 by step 20 is worse than the median 0.6 of 3 other trials "
        "by that step"
    )
    # two trials with no finite value are not behind each other
    assert median_stop(RULE, nan_peer, [nan_peer, nan_peer], "minimize") is None


def test_min_steps_and_done_still_hold_for_a_diverged_trial() -> None:
    peers = [curve(_good(), "minimize")] * 2
    early = curve([(0, math.nan), (4, math.nan)], "minimize")
    assert median_stop(RULE, early, peers, "minimize") is None  # before min_steps
    done = curve(_diverged(math.nan), "minimize", done=True)
    assert median_stop(RULE, done, peers, "minimize") is None


@pytest.mark.parametrize(
    "points",
    [
        pytest.param([(5, math.nan), (5, 1.0), (6, math.nan)], id="nan-first"),
        pytest.param([(5, 1.0), (6, math.nan), (5, math.nan)], id="nan-last"),
    ],
)
def test_a_step_with_a_finite_and_a_non_finite_report_keeps_the_finite_one(
    points: list[tuple[int, float]],
) -> None:
    c = curve(points, "minimize")
    assert (c.steps, c.best) == ((5, 6), (1.0, 1.0))
