"""A negative index given to ``parse_array`` says it is below 0: ``array: -3`` (a number, as
YAML reads it) and ``--array=-3`` were "'-3' is not an index range" (the number shown
quoted, as if written so), and ``array: -20000000`` "an index lies within 0..10,000,000"
without the index."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.job_array import parse_array


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (-3, "index -3 is below 0: an index lies within 0..10,000,000"),
        (-20_000_000, "index -20,000,000 is below 0"),
        (20_000_000, "index 20,000,000 is too large: an index lies within 0..10,000,000"),
        ("-3", "'-3' has an index below 0: an index lies within 0..10,000,000"),
        ("0-4,-1-5", "'-1-5' has an index below 0"),
    ],
)
def test_an_index_out_of_range_is_named(given: Any, says: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_array(given, "--array")
    assert raised.value.field == "--array"
    assert says in raised.value.message


@pytest.mark.parametrize("given", ["--3", "-", "3-", "0-9%-1"])
def test_other_text_is_still_no_index_range(given: str) -> None:
    with pytest.raises(SpecError, match="not"):
        parse_array(given)


def test_a_whole_number_in_range_is_its_one_index() -> None:
    assert parse_array(7).indices == (7,)
    assert parse_array(0).indices == (0,)
