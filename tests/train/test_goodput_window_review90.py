"""The goodput tuner's measurement under way (the configuration, its steps seen, the samples of
its next median) is kept in its state: a run resumed on the same configuration goes on with it.
Before, a resume settled and sampled the configuration again (up to SETTLE + SAMPLES - 1 steps'
timings lost at every restart: a job preempted more often than that never measured). The
samples kept while the gradient statistics are not known yet are the newest SAMPLES, not every
step's (the list grew by one a step, for good on a run whose statistics never came)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from danlu.train.goodput import SAMPLES, SETTLE, GoodputTuner

PLACEMENT = (1,)


def _tuner() -> GoodputTuner:
    return GoodputTuner(init_batch=64, max_batch=1024, max_micro=128)


def _record(tuner: GoodputTuner, step_time: float, stats: bool = True) -> None:
    tuner.record(
        micro=64,
        accumulation=1,
        placement=PLACEMENT,
        step_time=step_time,
        sync_time=0.0,
        grad_sqr=2.0 if stats else None,
        grad_var=64.0 if stats else None,
    )


def _through_a_checkpoint(state: dict[str, Any]) -> dict[str, Any]:
    """The state as a checkpoint's JSON skeleton gives it back."""
    return json.loads(json.dumps(state))


TIMES = [0.5, 0.4, 0.11, 0.12, 0.1, 0.13, 0.09]  # SETTLE + SAMPLES steps


def test_a_resume_goes_on_with_the_measurement_under_way() -> None:
    assert len(TIMES) == SETTLE + SAMPLES
    straight = _tuner()
    for t in TIMES:
        _record(straight, t)
    assert straight.tuner.state_dict()["compute"]  # the one measurement, made

    first = _tuner()
    for t in TIMES[:4]:
        _record(first, t)
    resumed = _tuner()
    resumed.load_state_dict(_through_a_checkpoint(first.state_dict()))
    for t in TIMES[4:]:
        _record(resumed, t)
    assert resumed.tuner.state_dict() == straight.tuner.state_dict()


def test_a_state_without_a_window_starts_a_fresh_one() -> None:
    tuner = _tuner()
    _record(tuner, 0.1)
    state = tuner.state_dict()
    del state["window"]  # a checkpoint written before it was kept
    resumed = _tuner()
    resumed.load_state_dict(state)
    assert resumed.state_dict()["window"] is None


@pytest.mark.parametrize(
    "window",
    [
        "abc",
        {"micro": 0, "accumulation": 1, "placement": [1], "seen": 3, "steps": [], "syncs": []},
        {"micro": 8, "accumulation": 1, "placement": [], "seen": 3, "steps": [], "syncs": []},
        {"micro": 8, "accumulation": 1, "placement": [1], "seen": 3, "steps": [1.0], "syncs": []},
        {
            "micro": 8,
            "accumulation": 1,
            "placement": [1],
            "seen": 3,
            "steps": [float("nan")],
            "syncs": [0.0],
        },
        {
            "micro": 8,
            "accumulation": 1,
            "placement": [1],
            "seen": 3,
            "steps": [1.0] * 9,
            "syncs": [0.0] * 9,
        },
    ],
)
def test_a_damaged_window_is_refused_and_nothing_is_loaded(window: object) -> None:
    tuner = _tuner()
    _record(tuner, 0.1)
    before = tuner.state_dict()
    state = dict(before, window=window)
    with pytest.raises(ValueError, match="goodput window"):
        _tuner().parse_state_dict(state)
    assert tuner.state_dict() == before


def test_the_samples_waiting_for_statistics_are_the_newest_few() -> None:
    tuner = _tuner()
    for i in range(200):
        _record(tuner, 0.1 + i / 1000, stats=False)
    window = tuner.state_dict()["window"]
    assert len(window["steps"]) == SAMPLES  # was 198, one more a step
    assert window["steps"][-1] == pytest.approx(0.1 + 199 / 1000)
