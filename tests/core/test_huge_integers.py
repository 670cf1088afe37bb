"""An integer of more digits than Python converts to text (``sys.get_int_max_str_digits()``,
4,300), given through the Python API (a spec as a mapping, ``parse_array``), is a
:class:`SpecError` naming its field: quoting it in the message (``repr``) or reading it as
text (``str``) raised a bare ``ValueError`` instead."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.job_array import parse_array
from danlu.core.spec import parse_spec
from danlu.core.units import parse_bytes
from danlu.core.values import check_values, quoted

HUGE = 10 ** (sys.get_int_max_str_digits() + 10)


def test_quoted_shows_a_huge_integer_by_its_magnitude() -> None:
    assert quoted(HUGE) == f"1e+{sys.get_int_max_str_digits() + 10}"
    assert quoted(-HUGE).startswith("-1e+")
    assert quoted(12345) == "12345"  # as before
    assert quoted("x" * 100) == repr("x" * 100)[:57] + "..."


def test_check_values_names_the_field_of_a_huge_integer() -> None:
    with pytest.raises(SpecError) as caught:
        check_values({"env": {"A": HUGE}})
    assert caught.value.field == "env.A"
    assert "2**62" in caught.value.message


SPECS: dict[str, dict[str, Any]] = {
    "resources.memory": {"resources": {"memory": HUGE}},
    "depends_on.0": {"depends_on": [HUGE]},
    "user": {"user": HUGE},
}
"""Spec fields holding a huge integer, by the field an error names (test ids: pytest would
show the integer itself, which it cannot)."""


@pytest.mark.parametrize("field", list(SPECS))
def test_a_spec_mapping_with_a_huge_integer_names_its_field(field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "a", "command": ["x"], **SPECS[field]})
    assert caught.value.field == field


def test_a_huge_byte_size_is_too_large() -> None:
    with pytest.raises(SpecError, match="too large a size") as caught:
        parse_bytes(HUGE, "resources.memory")
    assert caught.value.field == "resources.memory"


@pytest.mark.parametrize("name", ["huge", "huge negative", "one past"])
def test_an_array_index_beyond_the_range_as_an_integer_is_refused(name: str) -> None:
    index = {"huge": HUGE, "huge negative": -HUGE, "one past": 10_000_001}[name]
    with pytest.raises(SpecError, match="10,000,000") as caught:
        parse_array(index)
    assert caught.value.field == "array"


def test_an_array_index_as_an_integer_within_the_range_is_read_as_before() -> None:
    assert parse_array(10_000_000).indices == (10_000_000,)
    assert parse_array(7).indices == (7,)
    with pytest.raises(SpecError, match="index -1 is below 0"):
        parse_array(-1)
