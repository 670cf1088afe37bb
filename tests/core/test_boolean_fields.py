"""Every true-or-false field of a spec takes one rule (``true_or_false``): ``shell`` and
``preemptible`` took ``1`` and ``0`` while ``training.activation_checkpointing`` refused them;
it took ``' yes '`` with its blanks while they refused it. Now each takes what either took,
and a value none took is refused alike, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import parse_spec
from danlu.core.sweep import parse_sweep

JOB: dict[str, Any] = {"name": "a", "command": ["python", "train.py"]}


def _job_with(field: str, value: Any) -> dict[str, Any]:
    if field == "training.activation_checkpointing":
        return {**JOB, "training": {"activation_checkpointing": value}}
    return {**JOB, field: value}


def _read(field: str, value: Any) -> bool:
    spec = parse_spec(_job_with(field, value))
    if field == "training.activation_checkpointing":
        return spec.training.activation_checkpointing
    result: bool = getattr(spec, field)
    return result


FIELDS = ["shell", "preemptible", "training.activation_checkpointing"]
TRUE = [True, 1, 1.0, "1", "true", "Yes", " on ", "T", "y"]
FALSE = [False, 0, 0.0, "0", "false", "No", " off ", "F", "n"]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", TRUE)
def test_every_boolean_field_reads_true_alike(field: str, value: Any) -> None:
    spec = _job_with(field, value)
    if field == "shell":
        spec["command"] = ["python train.py"]  # one string, as shell: true takes
    parsed = parse_spec(spec)
    if field == "training.activation_checkpointing":
        assert parsed.training.activation_checkpointing is True
    else:
        assert getattr(parsed, field) is True


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", FALSE)
def test_every_boolean_field_reads_false_alike(field: str, value: Any) -> None:
    assert _read(field, value) is False


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize(
    ("value", "says"),
    [
        (2, "2 is not true or false: write true or false"),
        ("maybe", "'maybe' is not true or false: write true or false"),
        (0.5, "must be true or false, not a number (0.5)"),
        ([True], "must be true or false, not a list"),
        (None, "is null"),
    ],
)
def test_every_boolean_field_refuses_alike(field: str, value: Any, says: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec(_job_with(field, value))
    assert raised.value.field == field
    assert says in raised.value.message


@pytest.mark.parametrize(("value", "array"), [(1, True), ("yes", True), (" 0 ", False)])
def test_a_sweep_s_array_takes_the_same_rule(value: Any, array: bool) -> None:
    sweep = parse_sweep(
        {
            "name": "arr",
            "trial": JOB,
            "parameters": {"index": {"values": [0, 1]}},
            "method": "grid",
            "array": value,
        }
    )
    assert sweep.array is array
