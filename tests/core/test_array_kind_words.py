"""A spec's ``array:`` that is not text was refused with Python's type name (``got list``,
``got dict``, ``got float``, ``got NoneType``); a YAML author wrote a list, a mapping, a
number, nothing. The error now says it in YAML's words (:func:`yaml_kind`)."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.job_array import parse_array
from danlu.core.spec_text import load_yaml, yaml_kind


@pytest.mark.parametrize(
    ("written", "got"),
    [
        ("[1, 3, 8]", "a list"),
        ("{a: 1}", "a mapping"),
        ("true", "a boolean"),
        ("1.50", "a number (1.50)"),
        ("~", "null"),
        ("", "null"),
        ("2024-01-01", "a date (2024-01-01)"),
    ],
)
def test_a_spec_array_not_text_is_named_in_yaml_words(written: str, got: str) -> None:
    value = load_yaml(f"array: {written}\n")["array"]
    with pytest.raises(SpecError) as info:
        parse_array(value)
    assert info.value.field == "array"
    assert f"expected an index range as text, got {got}: write it as text" in str(info.value)


@pytest.mark.parametrize(
    ("value", "kind"),
    [((1, 2), "a list"), ("x", "text"), (7, "a number (7)"), (b"0-9", "bytes")],
)
def test_yaml_kind(value: object, kind: str) -> None:
    assert yaml_kind(value) == kind
