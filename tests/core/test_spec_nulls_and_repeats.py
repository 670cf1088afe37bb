"""A job spec's text items and env that YAML read as null (or as a list or mapping) are
refused naming the item and saying to write a quoted string; ``depends_on`` keeps each job
with each condition once; a ``checkpoint_dir`` ``file://`` URL is recognised whatever the
case of its scheme (a relative one is refused, an absolute one held as ``file://``)."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import loads_spec, parse_spec
from danlu.core.sweep import parse_sweep

BASE = "name: a\ncommand: [x]\n"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("env: {A: null}\n", "env.A"),
        ("env: {A: }\n", "env.A"),
        ("env: {A: ~}\n", "env.A"),
        ("env:\n  B: '1'\n  A:\n", "env.A"),
    ],
)
def test_a_null_env_value_names_the_variable_and_says_to_quote_a_string(
    text: str, field: str
) -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec(BASE + text)
    assert caught.value.field == field
    message = caught.value.message
    assert "null" in message and "valid string" not in message
    assert "write a string, quoted" in message and "''" in message


def test_a_null_command_item_is_named_as_the_env_value_is() -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec("name: a\ncommand: [python, null]\n")
    assert caught.value.field == "command.1"
    assert "write a string, quoted" in caught.value.message


@pytest.mark.parametrize(("value", "kind"), [("[1, 2]", "list"), ("{b: c}", "mapping")])
def test_an_env_value_that_is_a_list_or_mapping_says_to_write_one_string(
    value: str, kind: str
) -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec(BASE + f"env: {{A: {value}}}\n")
    assert caught.value.field == "env.A"
    assert f"is a {kind}, not text" in caught.value.message


@pytest.mark.parametrize("value", ["null", "[A=1]", "'A=1'"])
def test_an_env_that_is_no_mapping_says_what_to_write(value: str) -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec(BASE + f"env: {value}\n")
    assert caught.value.field == "env"
    assert "env: {SEED: '1'}" in caught.value.message


def test_an_env_of_strings_is_read() -> None:
    assert loads_spec(BASE + "env: {A: '', B: 'null', C: x}\n").env == {
        "A": "",
        "B": "null",
        "C": "x",
    }


def _dependencies(value: Any, *, stored: bool = False) -> list[tuple[str, str]]:
    spec = parse_spec({"name": "a", "command": ["x"], "depends_on": value}, stored=stored)
    return [(d.job, d.condition) for d in spec.depends_on]


@pytest.mark.parametrize("stored", [False, True])
def test_a_job_named_twice_alike_in_depends_on_is_one_entry(stored: bool) -> None:
    written = [
        "abcd",
        {"job": "0123456789ab", "condition": "started"},
        "abcd",
        {"job": "abcd", "condition": "succeeded"},
        {"job": "0123456789ab", "condition": "started"},
    ]
    assert _dependencies(written, stored=stored) == [
        ("abcd", "succeeded"),
        ("0123456789ab", "started"),
    ]


def test_a_job_named_with_two_conditions_stays_twice() -> None:
    written = ["abcd", {"job": "abcd", "condition": "started"}]
    assert _dependencies(written) == [("abcd", "succeeded"), ("abcd", "started")]


def test_a_sweep_trial_naming_a_job_twice_alike_is_read() -> None:
    sweep = parse_sweep(
        {
            "name": "s",
            "method": "grid",
            "parameters": {"lr": {"values": [0.1, 0.2]}},
            "trial": {"command": ["x"], "depends_on": ["0123456789ab", "0123456789ab"]},
        }
    )
    assert [d.job for d in sweep.trial_spec().depends_on] == ["0123456789ab"]


@pytest.mark.parametrize("location", ["FILE://ckpt/run1", "File://~/ckpt", "fILe:ckpt"])
def test_a_relative_file_url_is_refused_whatever_the_case_of_its_scheme(location: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "a", "command": ["x"], "checkpoint_dir": location})
    assert caught.value.field == "checkpoint_dir"
    assert "relative path" in caught.value.message


@pytest.mark.parametrize("stored", [False, True])
def test_a_file_url_is_held_with_its_scheme_in_lower_case(stored: bool) -> None:
    data = {"name": "a", "command": ["x"], "checkpoint_dir": "FILE:///shared/ckpt/Run1"}
    assert parse_spec(data, stored=stored).checkpoint_dir == "file:///shared/ckpt/Run1"


def test_a_stored_relative_file_url_in_upper_case_is_still_read() -> None:
    data = {"name": "a", "command": ["x"], "checkpoint_dir": "FILE://ckpt"}
    assert parse_spec(data, stored=True).checkpoint_dir == "file://ckpt"


@pytest.mark.parametrize("location", ["s3://Bucket/Run", "/Shared/FILE://x", "file:///a"])
def test_other_locations_are_kept_as_written(location: str) -> None:
    data = {"name": "a", "command": ["x"], "checkpoint_dir": location}
    assert parse_spec(data).checkpoint_dir == location
