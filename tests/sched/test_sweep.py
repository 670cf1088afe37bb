"""The sweep's searcher: trial parameters drawn from the seed and the trial number alone,
grid order, and the median stopping rule."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danlu.core.errors import SpecError
from danlu.core.sweep import EarlyStopping, parse_sweep
from danlu.sched.sweep import curve, median_stop, trial_parameters


def _spec(**extra: Any) -> Any:
    return parse_sweep(
        {
            "name": "s",
            "trial": {"command": ["python", "t.py"]},
            "parameters": {
                "lr": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-1},
                "width": {"distribution": "int", "low": 2, "high": 5},
                "momentum": {"distribution": "uniform", "low": 0.8, "high": 0.9},
                "opt": {"values": ["sgd", "adam"]},
            },
            "metric": {"name": "loss"},
            "trials": 50,
            **extra,
        }
    )


@given(seed=st.integers(0, 2**62), n=st.integers(0, 9_999))
def test_random_parameters_lie_in_their_ranges_and_depend_on_seed_and_trial_only(
    seed: int, n: int
) -> None:
    spec = _spec(seed=seed)
    params = trial_parameters(spec, n)
    assert params == trial_parameters(_spec(seed=seed, parallel=7), n)  # nothing else counts
    assert 1e-4 <= float(params["lr"]) <= 1e-1
    assert params["width"] in (2, 3, 4, 5) and isinstance(params["width"], int)
    assert 0.8 <= float(params["momentum"]) <= 0.9
    assert params["opt"] in ("sgd", "adam")


def test_random_draws_cover_the_range_on_the_log_scale() -> None:
    spec = _spec(trials=400)
    lrs = [float(trial_parameters(spec, n)["lr"]) for n in range(400)]
    below = sum(lr < math.sqrt(1e-4 * 1e-1) for lr in lrs)  # the geometric midpoint
    assert 150 < below < 250
    assert {trial_parameters(spec, n)["width"] for n in range(400)} == {2, 3, 4, 5}
    assert trial_parameters(spec, 0) != trial_parameters(_spec(seed=1), 0)


def test_grid_takes_every_combination_once_the_last_parameter_fastest() -> None:
    spec = parse_sweep(
        {
            "name": "g",
            "trial": {"command": ["x"]},
            "parameters": {"a": {"values": [1, 2]}, "b": {"values": ["x", "y", "z"]}},
            "metric": {"name": "acc", "goal": "maximize"},
            "method": "grid",
        }
    )
    points = [trial_parameters(spec, n) for n in range(spec.total)]
    assert spec.total == 6
    assert [(p["a"], p["b"]) for p in points] == [
        (1, "x"),
        (1, "y"),
        (1, "z"),
        (2, "x"),
        (2, "y"),
        (2, "z"),
    ]
    limited = parse_sweep({**spec.model_dump(mode="json"), "trials": 4})
    assert limited.total == 4


def test_the_median_rule_stops_only_a_trial_behind_enough_others() -> None:
    rule = EarlyStopping(min_steps=20, min_trials=2)
    a = curve([(10, 1.0), (20, 0.5), (30, 0.2)], "minimize")
    b = curve([(30, 0.3), (10, 0.9), (20, 0.4)], "minimize")  # any order
    assert (a.best_by(5), a.best_by(25), a.last_step) == (None, 0.5, 30)
    behind = curve([(10, 2.0), (20, 1.5)], "minimize")
    reason = median_stop(rule, behind, [a, b], "minimize")
    assert reason == (
        "stopped early: best 1.5 by step 20 is worse than the median 0.45 of 2 other trials "
        "by that step"
    )
    assert median_stop(rule, curve([(10, 2.0), (20, 0.45)], "minimize"), [a, b], "minimize") is None
    assert median_stop(rule, curve([(10, 2.0)], "minimize"), [a, b], "minimize") is None  # early
    assert median_stop(rule, behind, [a], "minimize") is None  # too few others
    short = curve([(10, 0.1)], "minimize")  # never reached step 20: not a peer there
    assert median_stop(rule, behind, [a, short], "minimize") is None
    up = [curve([(10, 0.5), (20, 0.9)], "maximize"), curve([(10, 0.6), (20, 0.8)], "maximize")]
    low = curve([(10, 0.1), (20, 0.2), (20, float("nan"))], "maximize")
    assert low.last_step == 20 and low.best_by(20) == -0.2  # NaN never the best
    reason = median_stop(rule, low, up, "maximize")
    assert reason is not None and "best 0.2 by step 20" in reason and "median 0.85" in reason


def test_bad_sweep_specs_name_the_field() -> None:
    base = _spec().model_dump(mode="json")
    refused = {
        "parameters.lr": {
            "parameters": {"lr": {"distribution": "log_uniform", "low": 0, "high": 1}}
        },
        "parameters.x": {"parameters": {"x": {"values": [1], "low": 0}}},
        "parameters.y": {"parameters": {"y": {"distribution": "int", "low": 0.5, "high": 2}}},
        "metric.goal": {"metric": {"name": "loss", "goal": "lowest"}},
        "parallel": {"parallel": 0},
        "trial.resources.gpus": {"trial": {"command": ["x"], "resources": {"gpus": "many"}}},
        "name": {"name": "no spaces"},
        # a grid past MAX_TRIALS named no field
        "parameters": {
            "method": "grid",
            "parameters": {"a": {"values": list(range(200))}, "b": {"values": list(range(200))}},
        },
    }
    for field, change in refused.items():
        with pytest.raises(SpecError) as caught:
            parse_sweep({**base, **change})
        assert caught.value.field == field, (field, caught.value)


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("trials", {"trials": True}),
        ("parallel", {"parallel": True}),
        ("seed", {"seed": False}),
        (
            "parameters.n.high",
            {"parameters": {"n": {"distribution": "int", "low": 0, "high": True}}},
        ),
        ("early_stopping.min_trials", {"early_stopping": {"min_trials": True}}),
    ],
)
def test_a_yaml_boolean_is_no_number_in_a_sweep(field: str, change: dict[str, Any]) -> None:
    """``trials: yes`` was one trial and ``high: on`` a bound of 1: YAML's booleans were
    taken as numbers, as the job spec's fields no longer are."""
    base = _spec().model_dump(mode="json") | {"metric": {"name": "loss"}}
    with pytest.raises(SpecError, match="got a boolean") as caught:
        parse_sweep({**base, **change})
    assert caught.value.field == field


@pytest.mark.parametrize(("low", "high"), [(1e300, 1e300), (-1e20, 0), (0, 2.0**63)])
def test_an_int_distribution_keeps_within_the_integers_the_store_takes(
    low: float, high: float
) -> None:
    """Float bounds such as 1e300 let an int distribution draw integers of 300 digits."""
    base = _spec().model_dump(mode="json")
    with pytest.raises(SpecError, match=r"within -2\*\*62\.\.2\*\*62") as caught:
        parse_sweep(
            {**base, "parameters": {"n": {"distribution": "int", "low": low, "high": high}}}
        )
    assert caught.value.field == "parameters.n"


def _tpe_spec(**extra: Any) -> Any:
    return parse_sweep(
        {
            "name": "t",
            "trial": {"command": ["x"]},
            "parameters": {
                "x": {"distribution": "uniform", "low": 0, "high": 10},
                "k": {"distribution": "int", "low": 1, "high": 4},
                "opt": {"values": ["sgd", "adam"]},
            },
            "metric": {"name": "loss"},
            "method": "tpe",
            "trials": 60,
            "startup_trials": 10,
            **extra,
        }
    )


def test_tpe_draws_where_the_ended_trials_did_best() -> None:
    from danlu.sched.sweep import Ended

    spec = _tpe_spec()
    assert trial_parameters(spec, 3, []) == trial_parameters(_spec_random_like(spec), 3)
    ended = [
        Ended(p, (float(p["x"]) - 7.0) ** 2)
        for p in (trial_parameters(spec, n) for n in range(30))  # random: no history given
    ]
    guided = [trial_parameters(spec, n, ended) for n in range(30, 60)]
    assert guided[0] == trial_parameters(spec, 30, ended)  # seeded: the same point again
    guided_error = sum(abs(float(p["x"]) - 7.0) for p in guided) / len(guided)
    random_error = sum(abs(float(p["x"]) - 7.0) for p in map(lambda e: e.parameters, ended)) / 30
    assert guided_error < 0.6 * random_error, (guided_error, random_error)
    assert all(0 <= float(p["x"]) <= 10 and p["k"] in (1, 2, 3, 4) for p in guided)
    maximised = _tpe_spec(metric={"name": "acc", "goal": "maximize"})
    flipped = [Ended(e.parameters, -e.value) for e in ended]
    assert trial_parameters(maximised, 40, flipped) == trial_parameters(spec, 40, ended)


def _spec_random_like(spec: Any) -> Any:
    return parse_sweep({**spec.model_dump(mode="json"), "method": "random"})


def test_tpe_counts_the_running_trials_as_doing_badly() -> None:
    from danlu.sched.sweep import Ended

    spec = _tpe_spec()
    ended = [
        Ended(p, (float(p["x"]) - 7.0) ** 2) for p in (trial_parameters(spec, n) for n in range(30))
    ]
    alone = trial_parameters(spec, 30, ended)
    crowded = [dict(alone, x=x) for x in (6.8, 6.9, 7.0, 7.1, 7.2)]  # others near the best
    told = trial_parameters(spec, 30, ended, crowded)
    assert told == trial_parameters(spec, 30, ended, crowded)  # seeded
    assert told != alone


def test_log_uniform_draws_stay_within_bounds_that_exp_log_rounds_past() -> None:
    # exp(log(0.1)) is 0.10000000000000002: a point range drew above its own high
    spec = parse_sweep(
        {
            "name": "p",
            "trial": {"command": ["x"]},
            "parameters": {"lr": {"distribution": "log_uniform", "low": 0.1, "high": 0.1}},
            "metric": {"name": "acc", "goal": "maximize"},
            "trials": 5,
        }
    )
    assert {trial_parameters(spec, n)["lr"] for n in range(5)} == {0.1}
