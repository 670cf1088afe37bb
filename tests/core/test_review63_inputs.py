"""Inputs sent to a real server: numbers past a float's range in a
duration, clock-style durations with fields over 59, a sweep range as wide as the floats,
and huge integers that got the store's generic bound instead of the field's own range."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from danlu.core.errors import SpecError
from danlu.core.spec import JobSpec, parse_spec
from danlu.core.sweep import SWEEP_LIMITS, parse_sweep
from danlu.core.units import parse_duration
from danlu.core.values import check_values
from danlu.sched.sweep import trial_parameters

BASE: dict[str, Any] = {"name": "d", "command": ["true"], "resources": {"gpus": 1}}


def _first_error(data: dict[str, Any]) -> tuple[str, str]:
    """The field and message of the first error of validating ``data`` as the server's
    route does: pydantic on the body (FastAPI), before any of danlu's own checks."""
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate(data)
    first = info.value.errors()[0]
    return ".".join(str(p) for p in first["loc"]), str(first["msg"])


# 1. a duration given as an integer beyond a float's range: OverflowError (a 500) before


@pytest.mark.parametrize("field", ["deadline", "time_limit", "preempt_grace"])
def test_a_duration_past_a_floats_range_is_refused_naming_the_field(field: str) -> None:
    with pytest.raises(SpecError, match="too large a duration") as info:
        parse_duration(10**400, field)
    assert info.value.field == field
    where, message = _first_error({**BASE, field: 10**400})
    assert where == field and "too large a duration" in message and len(message) < 300
    assert parse_duration(10**300, field) == 1e300  # a huge one a float holds is read


@pytest.mark.parametrize(
    "text", ["9" * 400 + ":00", "9" * 400 + "-00", "1:" + "9" * 400], ids=["MM:SS", "D-HH", "SS"]
)
def test_a_clock_duration_past_a_floats_range_is_refused(text: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_duration(text, "time_limit")
    assert info.value.field == "time_limit"


# 2. clock-style durations: minutes and seconds over 59, hours over 23 after days


@pytest.mark.parametrize(
    ("text", "form"),
    [
        ("00:99", "MM:SS"),
        ("1:60", "MM:SS"),
        ("01:60:00", "HH:MM:SS"),
        ("01:00:60", "HH:MM:SS"),
        ("1-24", "D-HH"),
        ("1-12:60", "D-HH:MM"),
        ("99999-99:99:99", "D-HH:MM:SS"),
        ("1-00:00:60", "D-HH:MM:SS"),
    ],
)
def test_a_clock_field_over_its_range_is_refused_naming_the_form(text: str, form: str) -> None:
    with pytest.raises(SpecError, match=form) as info:
        parse_duration(text, "time_limit")
    assert info.value.field == "time_limit"
    where, message = _first_error({**BASE, "time_limit": text})
    assert where == "time_limit" and form in message


def test_only_the_first_clock_field_may_pass_its_units_range() -> None:
    documented = {
        "00:59": 59.0,
        "90:00": 5400.0,  # the leading field has no unit above it to carry into
        "100:00:00": 360_000.0,
        "23:59:59": 86_399.0,
        "3-23:59:59": 345_599.0,
        "1-12": 129_600.0,
        "1-12:30": 131_400.0,
        "400-00": 400 * 86_400.0,
    }
    assert {text: parse_duration(text) for text in documented} == documented
    with pytest.raises(SpecError, match="MM:SS"):
        parse_duration("00:60")


# 3. a sweep range wider than the floats: every trial drew lr = Infinity


def _sweep(parameter: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "s",
        "trial": {"command": ["true"], "resources": {"gpus": 1}},
        "parameters": {"lr": parameter},
        "trials": 20,
        "seed": 1,
    }


@pytest.mark.parametrize(("low", "high"), [(-1e308, 1e308), (-1.7e308, 1.7e308)])
def test_a_uniform_range_wider_than_a_float_is_refused_naming_the_field(
    low: float, high: float
) -> None:
    with pytest.raises(SpecError, match="too wide") as info:
        parse_sweep(_sweep({"distribution": "uniform", "low": low, "high": high}))
    assert info.value.field == "parameters.lr"


def test_the_widest_accepted_ranges_draw_finite_values_within_them() -> None:
    with pytest.raises(SpecError, match="too wide"):
        parse_sweep(_sweep({"distribution": "uniform", "low": -1e308, "high": 1e308}))
    for parameter in (
        {"distribution": "uniform", "low": -8e307, "high": 8e307},
        {"distribution": "log_uniform", "low": 5e-324, "high": 1e308},
        {"distribution": "int", "low": -(2**62), "high": 2**62},
    ):
        spec = parse_sweep(_sweep(parameter))
        for n in range(200):
            value = trial_parameters(spec, n)["lr"]
            assert isinstance(value, int | float) and math.isfinite(value)
            assert parameter["low"] <= value <= parameter["high"]


# 4. a huge integer got "between -2**62 and 2**62", not the field's own range


@pytest.mark.parametrize(
    ("data", "field", "hint"),
    [
        ({**BASE, "priority": 10**30}, "priority", "within -1,000,000..1,000,000"),
        ({**BASE, "priority": -(10**30)}, "priority", "within -1,000,000..1,000,000"),
        ({**BASE, "max_restarts": 10**30}, "max_restarts", "within 0..1,000,000"),
        ({**BASE, "resources": {"gpus": 10**30}}, "resources.gpus", "within 1..1,048,576"),
        (
            {**BASE, "resources": {"gpus": {"min": 1, "max": 10**30}}},
            "resources.gpus.max",
            "within 1..1,048,576",
        ),
        (
            {**BASE, "training": {"global_batch_size": 10**30}},
            "training.global_batch_size",
            "within 1..1,073,741,824",
        ),
    ],
)
def test_a_huge_integer_gets_the_fields_own_range(
    data: dict[str, Any], field: str, hint: str
) -> None:
    with pytest.raises(SpecError) as info:  # the CLI and a sweep's trial
        parse_spec(data)
    assert info.value.field == field and hint in info.value.message
    assert "2**62" not in str(info.value) and len(str(info.value)) < 200
    where, message = _first_error(data)  # the server's route: pydantic first
    assert where == field and hint in message and "2**62" not in message


def test_a_sweeps_huge_integers_get_their_own_ranges() -> None:
    trial = {**_sweep({"values": [1]}), "trial": {**BASE, "priority": 10**30}}
    with pytest.raises(SpecError) as info:
        parse_sweep(trial)
    assert info.value.field == "trial.priority"
    assert "within -1,000,000..1,000,000" in info.value.message
    # what the server checks a sweep's body with before parsing it
    for body, field, hint in (
        (trial, "trial.priority", "within -1,000,000..1,000,000"),
        ({**_sweep({"values": [1]}), "trials": 10**30}, "trials", "within 1..10,000"),
    ):
        with pytest.raises(SpecError) as info:
            check_values(body, limits=SWEEP_LIMITS)
        assert info.value.field == field and hint in info.value.message
