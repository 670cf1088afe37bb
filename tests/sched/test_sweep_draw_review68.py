"""An ``int`` distribution's draws lie within the integers given, beyond 2**53
too (random drew ``int()`` of the rounded float bounds, and Optuna's TPE works in floats:
the range 2**53 + 1..2**53 + 3 drew 2**53 + 4 and 2**53, and one near 2**62 crashed on NaN)."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.sweep import SweepSpec, parse_sweep
from danlu.sched.sweep import Ended, trial_parameters

RANGES = [
    (2**53 + 1, 2**53 + 1),
    (2**53 + 1, 2**53 + 3),
    (2**62 - 3, 2**62),
    (-(2**62), -(2**62) + 2),
    (-(2**62), 2**62),
    (2, 5),
]
IDS = ["point-2**53+1", "2**53+1..+3", "2**62-3..2**62", "-2**62..+2", "widest", "small"]


def _spec(low: int, high: int, **extra: Any) -> SweepSpec:
    return parse_sweep(
        {
            "name": "d",
            "trial": {"command": ["true"], "resources": {"gpus": 1}},
            "parameters": {
                "n": {"distribution": "int", "low": low, "high": high},
                "x": {"distribution": "uniform", "low": 0, "high": 1},
            },
            "metric": {"name": "loss"},
            "trials": 40,
            **extra,
        }
    )


def _within(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


@pytest.mark.parametrize(("low", "high"), RANGES, ids=IDS)
def test_random_int_draws_lie_within_the_exact_range(low: int, high: int) -> None:
    spec = _spec(low, high)
    draws = [trial_parameters(spec, n)["n"] for n in range(40)]
    assert all(_within(v, low, high) for v in draws), draws
    if high - low <= 2:  # a narrow range: every integer in it is drawn
        assert set(draws) == set(range(low, high + 1))


@pytest.mark.parametrize(("low", "high"), RANGES, ids=IDS)
def test_tpe_int_draws_lie_within_the_exact_range(low: int, high: int) -> None:
    pytest.importorskip("optuna")
    spec = _spec(low, high, method="tpe", startup_trials=0)
    history = [trial_parameters(_spec(low, high), n) for n in range(8)]  # random draws
    ended = [Ended(p, float(i)) for i, p in enumerate(history)]
    running = [trial_parameters(_spec(low, high), n) for n in range(8, 10)]
    draws = [trial_parameters(spec, n, ended, running)["n"] for n in range(10, 16)]
    assert all(_within(v, low, high) for v in draws), draws
    assert draws == [trial_parameters(spec, n, ended, running)["n"] for n in range(10, 16)]


def test_tpe_learns_from_ended_trials_of_a_range_beyond_the_floats() -> None:
    """The ended trials' integers are told to the sampler relative to ``low``, where a
    float holds them exactly: those near the best one draw the next trials near it."""
    pytest.importorskip("optuna")
    low, high = 2**62 - 1000, 2**62
    spec = _spec(low, high, method="tpe", startup_trials=0)
    history = [trial_parameters(_spec(low, high), n) for n in range(30)]
    ended = [Ended(p, float(abs(int(p["n"]) - (low + 100)))) for p in history]
    guided = [int(trial_parameters(spec, n, ended)["n"]) for n in range(30, 50)]
    assert all(low <= v <= high for v in guided)
    guided_error = sum(abs(v - (low + 100)) for v in guided) / len(guided)
    random_error = sum(e.value for e in ended) / len(ended)
    assert guided_error < 0.6 * random_error, (guided_error, random_error)


def test_a_stored_spec_with_float_bounds_draws_as_the_integer_one() -> None:
    """A sweep stored before the fix (``low: 2.0``) draws the trials it drew before."""
    spec = _spec(2, 5)
    stored = spec.model_dump(mode="json")
    stored["parameters"]["n"] = {"distribution": "int", "low": 2.0, "high": 5.0}
    old = SweepSpec.model_validate(stored)
    assert [trial_parameters(old, n) for n in range(20)] == [
        trial_parameters(spec, n) for n in range(20)
    ]
