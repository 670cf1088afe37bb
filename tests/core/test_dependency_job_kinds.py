"""A dependency's ``job`` that YAML read as a boolean, a list or a mapping is refused saying
what a job id is: pydantic said only "Input should be a valid string"."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import loads_spec, parse_spec

_FIX = "give the id `danlu submit` printed (12 hex digits), or 4 or more of its first characters"


@pytest.mark.parametrize(
    ("depends_on", "said"),
    [
        ("true", "true was read as a boolean, not a job id"),
        ("[yes]", "true was read as a boolean, not a job id"),
        ("[{job: off}]", "false was read as a boolean, not a job id"),
        ("[[3f2a]]", "['3f2a'] is a list, not a job id"),
        ("[{job: [3f2a]}]", "['3f2a'] is a list, not a job id"),
        ("[{job: {id: 3f2a}}]", "{'id': '3f2a'} is a mapping, not a job id"),
    ],
)
def test_a_job_that_is_no_text_says_what_a_job_id_is(depends_on: str, said: str) -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec(f"name: a\ndepends_on: {depends_on}\n")
    assert caught.value.field == "depends_on.0.job"
    assert caught.value.message == f"{said}: {_FIX}"


def test_a_job_id_and_its_errors_read_as_before() -> None:
    spec = loads_spec("name: a\ndepends_on: [3f2a, {job: '0123', condition: failed}]\n")
    assert [(d.job, d.condition) for d in spec.depends_on] == [
        ("3f2a", "succeeded"),
        ("0123", "failed"),
    ]
    with pytest.raises(SpecError, match=r"^depends_on\.0\.job: 'xyz' is not a job id: give"):
        loads_spec("name: a\ndepends_on: [xyz]\n")
    with pytest.raises(SpecError, match=r"^depends_on\.0\.job: 12 was read as a number: quote"):
        loads_spec("name: a\ndepends_on: [12]\n")


@pytest.mark.parametrize(("written", "meant"), [("ABCD1234", "abcd1234"), (" 3f2a ", "3f2a")])
def test_an_id_in_upper_case_or_with_blanks_says_the_id_to_write(written: str, meant: str) -> None:
    """It was told to "give the id (12 hex digits)", which ``ABCD1234`` is written in."""
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "a", "command": ["x"], "depends_on": [written]})
    assert caught.value.field == "depends_on.0.job"
    assert f"write {meant} (lower case, no blanks)" in caught.value.message
