"""Reading a job spec file. A key written twice is refused (naming it), as the
later value silently replaced the earlier one; a ``.json`` spec may start with a UTF-8 BOM;
``training.expected_duration`` takes a duration as ``time_limit`` does; a job array's range
or a number with thousands of digits is a field error, not a traceback; a text field that
YAML read as a number says to quote it."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import SpecError
from danlu.core.job_array import MAX_ARRAY_INDEX, parse_array
from danlu.core.spec import load_spec, load_spec_data, loads_spec, parse_spec

BASE = "name: big\ncommand: [python, train.py]\n"

# -- keys written twice ------------------------------------------------------------------------


def test_a_top_level_key_written_twice_in_yaml_is_refused_naming_it() -> None:
    text = BASE + "resources: {gpus: 4}\npriority: 5\nresources: {gpu_memory: 40GiB}\n"
    with pytest.raises(SpecError) as info:
        loads_spec(text)
    assert info.value.field == "resources"
    assert "written twice" in info.value.message
    assert "lines 3 and 5" in info.value.message


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (BASE + "resources:\n  gpus: 4\n  gpus: 2\n", "resources.gpus"),
        (BASE + "env: {A: '1', B: '2', A: '3'}\n", "env.A"),
        (BASE + "depends_on:\n- {job: abcd, job: abce}\n", "depends_on.0.job"),
        (BASE + "training: {family: gan, family: rl}\n", "training.family"),
        # the same key however it is written: YAML reads both as the number 1
        (BASE + "env: {1: a, 0x1: b}\n", "env.1"),
        (BASE + "name: other\n", "name"),
    ],
)
def test_a_nested_key_written_twice_in_yaml_is_refused_with_its_path(text: str, field: str) -> None:
    with pytest.raises(SpecError) as info:
        loads_spec(text)
    assert info.value.field == field
    assert "written twice" in info.value.message


def test_yaml_merge_keys_and_anchors_still_override_without_a_duplicate() -> None:
    text = (
        "name: a\ncommand: [a]\n"
        "resources: &r {gpus: 2, gpu_memory: 1GiB}\n"
        "training: {family: gan}\n"
    )
    assert loads_spec(text).resources.gpus.min == 2
    merged = "name: a\ncommand: [a]\nresources:\n  <<: {gpus: 2, cpus: 3}\n  gpus: 4\n"
    spec = loads_spec(merged)
    assert spec.resources.gpus.min == 4 and spec.resources.cpus == 3


def test_a_recursive_yaml_alias_is_still_read_without_hanging() -> None:
    with pytest.raises(SpecError):
        loads_spec("a: &a [*a]\nname: a\ncommand: [a]\n")


def test_a_key_written_twice_in_json_is_refused_naming_it() -> None:
    with pytest.raises(SpecError) as info:
        loads_spec('{"name": "big", "command": ["a"], "priority": 5, "priority": -5}', True)
    assert info.value.field == "priority"
    assert "written twice" in info.value.message


def test_a_nested_key_written_twice_in_json_is_refused_with_its_path() -> None:
    text = '{"name": "a", "command": ["a"], "depends_on": [{"job": "abcd", "job": "abce"}]}'
    with pytest.raises(SpecError) as info:
        loads_spec(text, True)
    assert info.value.field == "depends_on.0.job"
    text = '{"name": "a", "command": ["a"], "resources": {"gpus": 4, "gpus": 1}}'
    with pytest.raises(SpecError) as info:
        loads_spec(text, True)
    assert info.value.field == "resources.gpus"


def test_a_spec_file_with_a_key_twice_is_refused(tmp_path: Path) -> None:
    for name, text in (
        ("job.yaml", BASE + "priority: 1\npriority: 2\n"),
        ("job.json", '{"name": "a", "command": ["a"], "priority": 1, "priority": 2}'),
    ):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(SpecError, match="priority: written twice"):
            load_spec_data(path)


# -- a BOM -------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_a_spec_file_starting_with_a_bom_is_read(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"job.{suffix}"
    path.write_text('{"name": "hello", "command": ["python", "x.py"]}', encoding="utf-8-sig")
    assert load_spec(path).name == "hello"


def test_json_text_starting_with_a_bom_is_read() -> None:
    assert loads_spec('\ufeff{"name": "hello", "command": ["a"]}', True).name == "hello"


# -- training.expected_duration ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2h", 7200.0), ("01:30:00", 5400.0), ("90m", 5400.0), ("1-00", 86400.0), (600, 600.0)],
)
def test_expected_duration_takes_a_duration_as_time_limit_does(
    value: object, seconds: float
) -> None:
    spec = parse_spec({"name": "a", "command": ["a"], "training": {"expected_duration": value}})
    assert spec.training.expected_duration == seconds
    limit = parse_spec({"name": "a", "command": ["a"], "time_limit": value})
    assert limit.time_limit == seconds


@pytest.mark.parametrize("value", [True, False, "soon", "0", -5, "inf"])
def test_expected_duration_still_refuses_what_is_not_a_positive_duration(value: object) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({"name": "a", "command": ["a"], "training": {"expected_duration": value}})
    assert info.value.field == "training.expected_duration"


def test_expected_duration_from_yaml_text() -> None:
    spec = loads_spec(BASE + "training: {expected_duration: 2h}\n")
    assert spec.training.expected_duration == 7200.0


# -- huge numbers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "9" * 5000,
        "0-" + "9" * 5000,
        "1-" + "9" * 5000 + ":2",
        "0-3," + "9" * 4301,
        "0" * 5 + "9" * 9,
    ],
    ids=["one", "last", "last-step", "listed", "nine-digits"],
)
def test_an_array_index_of_thousands_of_digits_is_a_field_error(text: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_array(text, "--array")
    assert info.value.field == "--array"
    assert f"an index is at most {MAX_ARRAY_INDEX:,}" in info.value.message


def test_an_array_step_or_limit_of_thousands_of_digits_is_read_as_a_large_one() -> None:
    # as a step or a limit beyond the range already is: one task, or every task at once
    assert parse_array("1-3:" + "9" * 5000).indices == (1,)
    assert parse_array("1-3:99999999").indices == (1,)
    assert parse_array("1-3%" + "9" * 5000).parallel == 3
    assert parse_array("1-3%" + "0" * 5000 + "2").parallel == 2
    with pytest.raises(SpecError, match="not a number of tasks"):
        parse_array("1-3%" + "0" * 5000)


def test_leading_zeros_still_read_as_the_index() -> None:
    assert parse_array("0" * 5000 + "7").indices == (7,)


@pytest.mark.parametrize("is_json", [False, True])
def test_a_number_of_thousands_of_digits_in_a_spec_is_a_spec_error(is_json: bool) -> None:
    big = "9" * 5000
    text = (
        f'{{"name": "a", "command": ["a"], "array": {big}}}'
        if is_json
        else f"name: a\ncommand: [a]\narray: {big}\n"
    )
    with pytest.raises(SpecError, match="digits"):
        loads_spec(text, is_json)


def test_a_yaml_date_that_does_not_exist_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="not valid YAML"):
        loads_spec(BASE + "env: {WHEN: 2024-02-30}\n")


# -- text fields read as numbers ---------------------------------------------------------------


def test_the_text_fields_are_those_of_the_model() -> None:
    from danlu.core.spec import TEXT_FIELDS

    assert TEXT_FIELDS["name"] is False and TEXT_FIELDS["project"] is False
    assert TEXT_FIELDS["workdir"] is True and TEXT_FIELDS["checkpoint_dir"] is True
    assert TEXT_FIELDS["training.model"] is True
    assert "priority" not in TEXT_FIELDS and "command" not in TEXT_FIELDS


@pytest.mark.parametrize(
    ("line", "field", "kind"),
    [
        ("name: 2024", "name", "number"),
        ("project: 1.5", "project", "number"),
        ("user: yes", "user", "boolean"),
        ("workdir: 2024-01-01", "workdir", "date"),
        ("training: {model: 7}", "training.model", "number"),
    ],
)
def test_a_text_field_read_as_a_number_says_to_quote_it(line: str, field: str, kind: str) -> None:
    text = "command: [a]\n" + line + ("\nname: a\n" if field != "name" else "\n")
    with pytest.raises(SpecError) as info:
        loads_spec(text)
    assert info.value.field == field
    assert f"read as a {kind}" in info.value.message and "quote" in info.value.message


def test_a_quoted_number_is_a_name() -> None:
    assert loads_spec("name: '2024'\ncommand: [a]\n").name == "2024"
