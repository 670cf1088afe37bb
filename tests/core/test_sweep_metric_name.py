"""A sweep's ``metric.name`` that no trial can report (a record's own ``step`` or ``time``,
or a name a metric record may not have) is refused at submission, naming ``metric.name``:
it was taken, and every trial then ran without a value (no best trial, no early stopping)."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.metric_record import RecordError, check_record
from danlu.core.sweep import SweepSpec, parse_sweep

SWEEP: dict[str, Any] = {
    "name": "s",
    "trial": {"command": ["x"]},
    "parameters": {"lr": {"values": [1, 2]}},
    "trials": 3,
}


def _with_metric(name: str) -> dict[str, Any]:
    return {**SWEEP, "metric": {"name": name, "goal": "minimize"}}


@pytest.mark.parametrize("name", ["step", "time"])
def test_a_record_s_own_field_is_refused(name: str) -> None:
    record = check_record({"step": 1, "time": 5.0, "loss": 0.5}, "", now=10.0)
    assert name not in record.data  # why: a trial's record never carries it as a value
    with pytest.raises(SpecError) as caught:
        parse_sweep(_with_metric(name))
    assert caught.value.field == "metric.name"
    assert "record's own field" in caught.value.message
    assert "e.g. loss" in caught.value.message


@pytest.mark.parametrize(
    "name", ["lo\tss", "loss\n", "\x1b[31mloss", "lo\u202ess", "lo\x7fss", "lo\0ss", "lo\ud800"]
)
def test_a_name_no_record_may_have_is_refused(name: str) -> None:
    with pytest.raises(RecordError):  # why: the API refuses records naming it
        check_record({"step": 1, name: 0.5}, "", now=10.0)
    with pytest.raises(SpecError) as caught:
        parse_sweep(_with_metric(name))
    assert caught.value.field == "metric.name"


@pytest.mark.parametrize("name", ["loss", "val/loss", "accuracy@1", "損失", "Time", "steps"])
def test_a_reportable_name_is_taken(name: str) -> None:
    spec = parse_sweep(_with_metric(name))
    assert spec.metric is not None and spec.metric.name == name
    assert name in check_record({"step": 1, name: 0.5}, "", now=10.0).data


def test_a_stored_sweep_with_such_a_name_still_reads() -> None:
    """The check is the submission's: a stored spec is read as it was taken."""
    stored = SweepSpec.model_validate(_with_metric("lo\tss"))
    assert stored.metric is not None and stored.metric.name == "lo\tss"
