"""``--array`` refuses an index listed twice, as the API does, instead of merging
the repeats (``3,1,2,3``), and counts an array's size by its tasks, not by what it lists
(``0-999,0`` was refused as more than 1,000 tasks)."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.job_array import MAX_ARRAY_INDEX, ArrayRange, parse_array


@pytest.mark.parametrize(
    ("text", "index"),
    [
        ("3,1,2,3", 3),
        ("0-999,0", 0),  # listed twice, not "at most 1,000 tasks"
        ("0-10:2,4", 4),
        ("5,0-9%2", 5),
        (f"{MAX_ARRAY_INDEX},{MAX_ARRAY_INDEX}", MAX_ARRAY_INDEX),
    ],
)
def test_an_index_listed_twice_is_refused_naming_the_field(text: str, index: int) -> None:
    with pytest.raises(SpecError) as caught:
        parse_array(text, "--array")
    assert caught.value.field == "--array"
    assert caught.value.message == f"index {index} is listed twice; list each index once"


def test_overlapping_steps_that_share_no_index_are_one_array() -> None:
    assert parse_array("0-8:2,1-9:2%3") == ArrayRange(tuple(range(10)), 3)
    assert parse_array("999,0-998") == ArrayRange(tuple(range(1000)), 1000)
    with pytest.raises(SpecError, match="at most 1,000 tasks"):
        parse_array("1000,0-999")
