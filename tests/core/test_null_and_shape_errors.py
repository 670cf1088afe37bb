"""A field YAML read as null, a section that is no mapping, and a key YAML read as no text are
refused in words saying what to write: pydantic's "Input should be a valid dictionary or
instance of Resources" (``resources:`` left empty, its fields not indented under it), "Input
should be a valid integer" (``priority:`` with no value) and "Keys should be strings" (a key
``on:``, read as a boolean and shown as ``1``) said neither what was wrong nor the fix."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import loads_spec
from danlu.core.sweep import parse_sweep

NULL = "is null (YAML reads an empty value, ~ and null so)"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name: a\ncommand: [x]\nresources:\ngpus: 2\n", "resources"),
        ("name: a\ncommand: [x]\ntraining: ~\n", "training"),
        ("name: a\ncommand: [x]\npriority:\n", "priority"),
        ("name: a\ncommand:\n", "command"),
        ("name: a\ncommand: [x]\npreemptible: null\n", "preemptible"),
        ("name: a\ncommand: [x]\nresources: {cpus: }\n", "resources.cpus"),
        ("name:\ncommand: [x]\n", "name"),
    ],
)
def test_a_null_value_is_named_as_null(text: str, field: str) -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec(text)
    assert caught.value.field == field
    assert caught.value.message.startswith(NULL), caught.value.message
    assert "instance of" not in caught.value.message


def test_a_null_section_says_to_indent_its_fields() -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec("name: a\ncommand: [x]\nresources:\ngpus: 2\n")
    assert "write its fields indented under it" in caught.value.message


def test_a_section_that_is_no_mapping_says_so() -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec("name: a\ncommand: [x]\nresources: 2\n")
    assert caught.value.field == "resources"
    assert (
        caught.value.message
        == "must be a mapping of its fields, e.g. {field: value}, not a number (2)"
    )


@pytest.mark.parametrize(
    ("text", "field", "kind"),
    [
        ("name: a\ncommand: [x]\non: 2\n", "", "a boolean"),
        ("name: a\ncommand: [x]\nresources: {1: 2}\n", "resources", "a number"),
    ],
)
def test_a_key_read_as_no_text_says_so(text: str, field: str, kind: str) -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec(text)
    assert caught.value.field == field
    assert caught.value.message.startswith(f"a key YAML read as {kind}"), caught.value.message
    assert "check the spelling against the job spec reference" in caught.value.message


def test_a_sweep_null_field_is_named_as_null() -> None:
    with pytest.raises(SpecError) as caught:
        parse_sweep({"name": "s", "trial": None, "parameters": {"lr": {"values": [1]}}})
    assert caught.value.field == "trial"
    assert caught.value.message.startswith(NULL)
