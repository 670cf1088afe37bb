"""Numbers given as text that read as NaN or an infinity (``cpus: "nan"``, ``low: "inf"``):
a JSON body's NaN is refused by the body's check (:func:`~danlu.core.values.check_values`),
but text is not a number to it, and pydantic then read the text as the float.

- A job spec's ``resources.cpus`` / ``resources.gpu_fraction`` (and its durations) said
  pydantic's range ("Input should be greater than or equal to 0"); now "must be a finite
  number", as a NaN or an infinity given as a number is refused.
- A sweep's ``low`` / ``high`` was refused at ``parameters.<name>``; now at
  ``parameters.<name>.low`` (``.high``), the field itself.

Nothing is stored for a refused spec. Run on SQLite and PostgreSQL (the ``seeded`` store)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from danlu.core.errors import SpecError
from danlu.core.spec import parse_spec
from danlu.core.sweep import parse_sweep
from danlu.server.db import Database, Job, Sweep
from danlu.server.services import jobs, sweeps, users

NOW = 1_000_000.0
FINITE = "must be a finite number"
NON_FINITE_TEXT = ["nan", "NaN", " nan ", "inf", "-inf", "Infinity", "1e999"]


def _job(**resources: Any) -> dict[str, Any]:
    return {"name": "j", "command": ["python", "train.py"], "resources": {"gpus": 1, **resources}}


def _sweep(low: Any, high: Any, distribution: str = "uniform") -> dict[str, Any]:
    return {
        "name": "lr",
        "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
        "parameters": {"lr": {"distribution": distribution, "low": low, "high": high}},
        "trials": 2,
    }


def _count(db: Database, table: type[Job] | type[Sweep]) -> int:
    with db.read_session() as s:
        return s.scalar(select(func.count()).select_from(table)) or 0


@pytest.mark.parametrize("field", ["cpus", "gpu_fraction"])
@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_a_job_with_non_finite_text_resources_is_refused_as_not_finite(
    seeded: Database, field: str, text: str
) -> None:
    with seeded.session() as s, pytest.raises(SpecError) as caught:
        jobs.submit(s, _job(**{field: text}), users.get_user(s, "alice"), now=NOW)
    assert caught.value.field == f"resources.{field}"
    assert caught.value.message.startswith(FINITE), caught.value.message
    assert "Input should" not in caught.value.message
    assert _count(seeded, Job) == 0


@pytest.mark.parametrize("bound", ["low", "high"])
@pytest.mark.parametrize("distribution", ["uniform", "log_uniform", "int"])
def test_a_sweep_with_a_non_finite_bound_is_refused_at_the_bound(
    seeded: Database, bound: str, distribution: str
) -> None:
    low, high = ("nan", 1) if bound == "low" else (1, "inf")
    with seeded.session() as s, pytest.raises(SpecError) as caught:
        sweeps.create(s, _sweep(low, high, distribution), users.get_user(s, "alice"), now=NOW)
    assert caught.value.field == f"parameters.lr.{bound}"
    assert caught.value.message.startswith(FINITE), caught.value.message
    assert _count(seeded, Sweep) == 0 and _count(seeded, Job) == 0


@pytest.mark.parametrize("text", NON_FINITE_TEXT)
@pytest.mark.parametrize("field", ["cpus", "gpu_fraction"])
def test_every_spelling_of_a_non_finite_resource_is_refused_as_not_finite(
    field: str, text: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(_job(**{field: text}))
    assert caught.value.field == f"resources.{field}"
    assert caught.value.message.startswith(FINITE), caught.value.message


@pytest.mark.parametrize("field", ["deadline", "time_limit", "preempt_grace"])
def test_a_non_finite_text_duration_is_refused_as_not_finite(field: str) -> None:
    for text in ("nan", "inf"):
        with pytest.raises(SpecError) as caught:
            parse_spec({"name": "j", "command": ["python", "train.py"], field: text})
        assert caught.value.field == field
        assert caught.value.message.startswith(FINITE), caught.value.message


def test_finite_text_and_other_errors_read_as_before() -> None:
    spec = parse_spec(_job(cpus="2.5", gpu_fraction="0.5"))
    assert (spec.resources.cpus, spec.resources.gpu_fraction) == (2.5, 0.5)
    with pytest.raises(SpecError, match="is not a number"):
        parse_spec(_job(cpus="many"))
    with pytest.raises(SpecError, match="boolean"):
        parse_spec(_job(gpu_fraction=True))
    with pytest.raises(SpecError, match="less than or equal to 1"):
        parse_spec(_job(gpu_fraction="2"))


@pytest.mark.parametrize("value", [float("nan"), float("-inf"), "nan", "1e999"])
def test_a_sweep_bound_given_as_a_non_finite_number_names_the_bound(value: Any) -> None:
    for bound, body in (("low", _sweep(value, 1.0)), ("high", _sweep(0.0, value))):
        with pytest.raises(SpecError) as caught:
            parse_sweep(body)
        assert caught.value.field == f"parameters.lr.{bound}"
        assert caught.value.message.startswith(FINITE), caught.value.message
