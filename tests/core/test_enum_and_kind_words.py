"""A refused spec value is told in the spec's words, not pydantic's or Python's:

- a value none of an enumerated field's choices (``method: grit``, ``goal: minimise``,
  ``condition: succeded``) was "Input should be 'random', 'grid' or 'tpe'", without the
  value; now the value, the choices and, for a near miss, the choice meant;
- a value of another kind (a list, a mapping, a boolean, null) said "Input should be a
  valid string" (or integer, number, boolean) without what was given, or named it by its
  Python type or value (``got NoneType``, ``got list``, ``None: use fp32``, ``not True``).
  Every field of a job spec and of a sweep spec is fed every wrong kind;
- a list, mapping or text of too few or too many items was "List should have at most 100
  items after validation, not 101"; a grid of 10**192 combinations was said in 250 digits."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import BaseModel

from danlu.core.errors import SpecError
from danlu.core.spec import JobSpec, parse_spec
from danlu.core.sweep import EarlyStopping, Metric, Parameter, SweepSpec, parse_sweep

JOB = {"name": "a", "command": ["x"]}
SWEEP = {
    "name": "s",
    "trial": {"command": ["x"]},
    "parameters": {"lr": {"values": [1]}},
    "trials": 2,
    "metric": {"name": "loss"},
    "early_stopping": {"rule": "median"},
}


def _refused(parse: Any, data: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as caught:
        parse(data)
    return caught.value


@pytest.mark.parametrize(
    ("parse", "data", "field", "message"),
    [
        (
            parse_spec,
            {**JOB, "training": {"precision": "fp23"}},
            "training.precision",
            "'fp23' is not one of fp32, fp16 or bf16 (did you mean fp32?)",
        ),
        (
            parse_spec,
            {**JOB, "depends_on": [{"job": "3f2a", "condition": "succeded"}]},
            "depends_on.0.condition",
            "'succeded' is not one of succeeded, failed, finished or started "
            "(did you mean succeeded?)",
        ),
        (
            parse_spec,
            {**JOB, "depends_on": [{"job": "3f2a", "condition": "later"}]},
            "depends_on.0.condition",
            "'later' is not one of succeeded, failed, finished or started",
        ),
        (parse_sweep, {**SWEEP, "method": "grit"}, "method", "'grit' is not one of random, "),
        (parse_sweep, {**SWEEP, "method": "Grid"}, "method", "(did you mean grid?)"),
        (parse_sweep, {**SWEEP, "method": 3}, "method", "a number (3) is not one of random"),
        (
            parse_sweep,
            {**SWEEP, "metric": {"name": "loss", "goal": "minimise"}},
            "metric.goal",
            "'minimise' is not one of minimize or maximize (did you mean minimize?)",
        ),
        (
            parse_sweep,
            {**SWEEP, "early_stopping": {"rule": "mean"}},
            "early_stopping.rule",
            "'mean' is not median, the one choice",
        ),
        (
            parse_sweep,
            {**SWEEP, "parameters": {"lr": {"distribution": "log-uniform", "low": 1, "high": 2}}},
            "parameters.lr.distribution",
            "(did you mean log_uniform?)",
        ),
    ],
)
def test_a_value_none_of_the_choices_names_them_and_the_one_meant(
    parse: Any, data: dict[str, Any], field: str, message: str
) -> None:
    error = _refused(parse, data)
    assert error.field == field
    assert message in error.message
    assert "Input should be" not in error.message


def test_text_like_no_choice_gets_no_guess() -> None:
    error = _refused(parse_spec, {**JOB, "training": {"precision": "int8"}})
    assert "did you mean" not in error.message


WRONG_KINDS: dict[str, Any] = {
    "a list": [1],
    "a mapping": {"a": 1},
    "a boolean": True,
    "null": None,
    "a number": 1.5,
    "text": "abc",
}

PYTHON_WORDS = re.compile(
    r"Input should be|NoneType|\bNone\b|\bTrue\b|\bFalse\b|"
    r"got (?:str|int|float|list|dict|bool|tuple)\b|\b(?:str|dict|bool)\b"
)
"""What a message in the spec's words never holds: pydantic's phrase, Python's type names
and its spellings of null and the booleans."""


def _field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """The dotted path of every field of ``model`` and of the models of its sections."""
    paths: list[str] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        paths.append(prefix + name)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths += _field_paths(annotation, f"{prefix}{name}.")
    return paths


def _with(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``data`` with ``value`` at the dotted ``path`` (its sections copied)."""
    head, _, rest = path.partition(".")
    if not rest:
        return {**data, head: value}
    inner = data.get(head)
    return {**data, head: _with(inner if isinstance(inner, dict) else {}, rest, value)}


def _messages(parse: Any, base: dict[str, Any], paths: list[str]) -> list[str]:
    said = []
    for path in paths:
        for value in WRONG_KINDS.values():
            try:
                parse(_with(base, path, value))
            except SpecError as exc:
                said.append(str(exc))
    return said


def test_every_job_spec_field_says_a_wrong_kind_in_the_specs_words() -> None:
    paths = _field_paths(JobSpec)
    assert {"resources.gpus", "training.precision", "depends_on", "preemptible"} <= set(paths)
    said = _messages(parse_spec, JOB, paths)
    assert len(said) > 3 * len(paths)  # most wrong kinds are refused
    wrong = [message for message in said if PYTHON_WORDS.search(message)]
    assert not wrong, "\n".join(wrong)


def test_every_sweep_spec_field_says_a_wrong_kind_in_the_specs_words() -> None:
    paths = [p for p in _field_paths(SweepSpec) if p != "parameters"]
    paths += [f"metric.{name}" for name in Metric.model_fields]
    paths += [f"early_stopping.{name}" for name in EarlyStopping.model_fields]
    paths += [f"parameters.lr.{name}" for name in Parameter.model_fields]
    said = _messages(parse_sweep, SWEEP, ["parameters", *paths])
    assert len(said) > 3 * len(paths)
    wrong = [message for message in said if PYTHON_WORDS.search(message)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({**JOB, "name": ["a"]}, "name", "must be text, not a list (['a'])"),
        ({**JOB, "priority": {"a": 1}}, "priority", "must be a whole number, not a mapping"),
        ({**JOB, "shell": 1.5}, "shell", "must be true or false, not a number (1.5)"),
        ({**JOB, "preemptible": "maybe"}, "preemptible", "'maybe' is not true or false"),
        ({**JOB, "priority": "high"}, "priority", "'high' is not a whole number: write"),
        ({**JOB, "resources": {"memory": None}}, "resources.memory", "got null"),
        ({**JOB, "resources": {"gpus": None}}, "resources.gpus", "is null (YAML reads"),
        ({**JOB, "time_limit": True}, "time_limit", "got a boolean (true)"),
        ({**JOB, "command": True}, "command", "not a boolean (true)"),
        ({**JOB, "env": True}, "env", "a boolean (true) is not a mapping"),
    ],
)
def test_a_wrong_kind_is_named_as_the_spec_writes_it(
    data: dict[str, Any], field: str, message: str
) -> None:
    error = _refused(parse_spec, data)
    assert error.field == field
    assert message in error.message


def test_a_spec_that_is_no_mapping_says_what_it_is() -> None:
    assert str(_refused(parse_spec, [1])).endswith("got a list ([1])")  # type: ignore[arg-type]
    assert str(_refused(parse_sweep, None)).endswith("got null")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("parse", "data", "field", "message"),
    [
        (
            parse_spec,
            {**JOB, "depends_on": ["abcd"] * 101},
            "depends_on",
            "must hold at most 100 entries, not 101",
        ),
        (
            parse_sweep,
            {**SWEEP, "parameters": {"lr": {"values": []}}},
            "parameters.lr.values",
            "is empty: give at least 1 entry",
        ),
        (
            parse_sweep,
            {**SWEEP, "parameters": {"lr": {"values": list(range(1001))}}},
            "parameters.lr.values",
            "must hold at most 1,000 entries, not 1,001",
        ),
        (
            parse_sweep,
            {**SWEEP, "metric": {"name": ""}},
            "metric.name",
            "is empty: give at least 1 character",
        ),
        (
            parse_sweep,
            {**SWEEP, "metric": {"name": "x" * 65}},
            "metric.name",
            "must hold at most 64 characters, not 65",
        ),
        (
            parse_sweep,
            {**SWEEP, "parameters": {}},
            "parameters",
            "is empty: name at least one, e.g. lr:",
        ),
    ],
)
def test_too_few_or_too_many_items_are_counted_in_the_specs_words(
    parse: Any, data: dict[str, Any], field: str, message: str
) -> None:
    error = _refused(parse, data)
    assert error.field == field
    assert error.message.startswith(message), error.message


def test_a_huge_grid_is_counted_by_its_magnitude() -> None:
    parameters = {f"p{i}": {"values": list(range(1000))} for i in range(64)}
    error = _refused(parse_sweep, {**SWEEP, "method": "grid", "parameters": parameters})
    assert error.message.startswith("the grid has 1e+192 combinations; at most 10,000"), error
    assert len(str(error)) < 200


def test_a_quoted_number_of_thousands_of_digits_says_it_is_out_of_range() -> None:
    """pydantic said "Unable to parse input string as an integer, exceeded maximum size"."""
    huge = "1" + "0" * 5000
    error = _refused(parse_spec, {**JOB, "priority": huge})
    assert error.field == "priority"
    assert error.message.startswith("a number of 5,001 digits is beyond the field's range")
    error = _refused(parse_sweep, {**SWEEP, "seed": huge})
    assert error.field == "seed" and "5,001 digits" in error.message


def test_a_list_holding_an_integer_of_thousands_of_digits_is_shown_without_a_crash() -> None:
    """Python will not write an integer of over 4,300 digits as text: quoting a list that
    holds one raised, and the error was Python's "Exceeds the limit (4300 digits) for
    integer string conversion" (a stored spec, which skips the bound on numbers, reaches
    it)."""
    huge = 10**5000
    with pytest.raises(SpecError) as caught:
        parse_spec({**JOB, "resources": {"gpus": [huge]}}, stored=True)
    assert caught.value.field == "resources.gpus"
    assert caught.value.message.startswith("a list ([...]) is not a GPU count")
    with pytest.raises(SpecError) as caught:
        parse_spec({**JOB, "command": huge}, stored=True)
    assert caught.value.message.endswith("not a number (1e+5000)")
