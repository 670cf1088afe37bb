"""The median rule leaves alone a trial whose latest record says its training is done
(``progress`` >= 1): stopping it saves nothing, and it would end CANCELLED although it ran
to the end."""

from __future__ import annotations

from danlu.core.sweep import EarlyStopping
from danlu.sched.sweep import curve, median_stop

RULE = EarlyStopping(rule="median", min_steps=10, min_trials=2)
PEERS = [
    curve([(10, 0.3), (20, 0.2)], "minimize"),
    curve([(10, 0.4), (20, 0.25)], "minimize"),
]
BEHIND = [(10, 0.5), (20, 0.45)]


def test_a_done_trial_behind_the_median_is_not_stopped() -> None:
    done = curve(BEHIND, "minimize", done=True)
    assert done.done and done.last_step == 20
    assert median_stop(RULE, done, PEERS, "minimize") is None


def test_an_unfinished_trial_behind_the_median_is_still_stopped() -> None:
    running = curve(BEHIND, "minimize")
    assert not running.done  # a curve is not done unless told so
    reason = median_stop(RULE, running, PEERS, "minimize")
    assert reason == (
        "stopped early: best 0.45 by step 20 is worse than the median 0.225 of 2 other "
        "trials by that step"
    )


def test_a_done_trial_still_counts_as_a_peer() -> None:
    finished = [curve([(10, 0.3), (20, 0.2)], "minimize", done=True)] * 2
    reason = median_stop(RULE, curve(BEHIND, "minimize"), finished, "minimize")
    assert reason is not None and "median 0.2 of 2 other trials" in reason
