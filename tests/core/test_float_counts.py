"""A whole-number field given a float past 64 bits (``priority: 1e20``, ``trials: 1e300``):
the field's range, as for an integer that large, not pydantic's "Unable to parse input
string as an integer, exceeded maximum size"."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import parse_spec
from danlu.core.sweep import parse_sweep

JOB: dict[str, Any] = {"name": "a", "command": ["x"]}


@pytest.mark.parametrize(
    ("extra", "field", "range_"),
    [
        ({"priority": 1e20}, "priority", "-1,000,000..1,000,000"),
        ({"priority": -1e300}, "priority", "-1,000,000..1,000,000"),
        ({"max_restarts": 1e19}, "max_restarts", "0..1,000,000"),
        ({"resources": {"gpus": {"min": 1, "max": 1e20}}}, "resources.gpus.max", "1..1,048,576"),
        (
            {"training": {"global_batch_size": 1e300}},
            "training.global_batch_size",
            "1..1,073,741,824",
        ),
    ],
)
def test_a_job_field_gets_its_range(extra: dict[str, Any], field: str, range_: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**JOB, **extra})
    assert caught.value.field == field
    assert f"must lie within {range_} (got " in caught.value.message
    assert "string" not in caught.value.message


def test_the_float_is_shown_by_its_value() -> None:
    with pytest.raises(SpecError, match=r"\(got 100,000,000,000,000,000,000\)"):
        parse_spec({**JOB, "priority": 1e20})
    with pytest.raises(SpecError, match=r"\(got 1e\+300\)"):
        parse_spec({**JOB, "priority": 1e300})


def test_a_whole_float_within_range_is_still_read() -> None:
    spec = parse_spec({**JOB, "priority": 5.0, "max_restarts": 2.0})
    assert (spec.priority, spec.max_restarts) == (5, 2)


SWEEP: dict[str, Any] = {
    "name": "s",
    "trial": {"command": ["x"]},
    "parameters": {"lr": {"values": [1, 2]}},
    "trials": 3,
    "metric": {"name": "loss"},
}


@pytest.mark.parametrize(
    ("extra", "field", "range_"),
    [
        ({"trials": 1e20}, "trials", "1..10,000"),
        ({"trials": 1e300}, "trials", "1..10,000"),
        ({"parallel": 1e19}, "parallel", "1..1,000"),
        ({"startup_trials": -1e20}, "startup_trials", "0..10,000"),
        ({"early_stopping": {"min_trials": 1e30}}, "early_stopping.min_trials", "1..10,000"),
        (
            {"early_stopping": {"min_steps": 1e30}},
            "early_stopping.min_steps",
            "0..4,611,686,018,427,387,904",
        ),
    ],
)
def test_a_sweep_field_gets_its_range(extra: dict[str, Any], field: str, range_: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_sweep({**SWEEP, **extra})
    assert caught.value.field == field
    assert f"must lie within {range_} (got " in caught.value.message
    assert "string" not in caught.value.message


def test_a_sweep_still_refuses_a_boolean_and_reads_a_whole_float() -> None:
    with pytest.raises(SpecError, match="trials: expected a number, got a boolean"):
        parse_sweep({**SWEEP, "trials": True})
    with pytest.raises(SpecError, match=r"early_stopping\.min_steps: expected a number"):
        parse_sweep({**SWEEP, "early_stopping": {"min_steps": False}})
    assert parse_sweep({**SWEEP, "trials": 5.0, "parallel": 2.0}).trials == 5
