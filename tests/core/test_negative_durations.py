"""A duration in units or a clock form with a minus (``time_limit: -5m``) says it is below
zero, as a negative number of seconds is told (it said only "is not a duration", as of
text in no duration's form). ``--since`` and ``--at`` keep their own words for one."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import parse_spec
from danlu.core.units import parse_duration, parse_since

_BASE = {"name": "job", "command": ["python", "train.py"]}


@pytest.mark.parametrize(
    ("written", "fix"), [("-5m", "5m"), ("-1:00", "1:00"), ("-5:00", "5:00"), ("- 1h30m", "1h30m")]
)
def test_a_negative_duration_says_it_is_below_zero(written: str, fix: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**_BASE, "time_limit": written})
    assert caught.value.field == "time_limit"
    assert "below zero" in caught.value.message
    assert f"e.g. {fix}" in caught.value.message


@pytest.mark.parametrize("written", ["--5m", "-x", "-"])
def test_text_in_no_form_is_still_no_duration(written: str) -> None:
    with pytest.raises(SpecError, match="is not a duration"):
        parse_duration(written, "time_limit")


def test_a_negative_number_is_still_read_for_the_caller_to_refuse() -> None:
    assert parse_duration("-5", "f") == -5.0
    with pytest.raises(SpecError, match="not -5 seconds"):
        parse_spec({**_BASE, "time_limit": "-5"})


def test_since_keeps_its_words() -> None:
    with pytest.raises(SpecError, match="is not a duration of 0 or more"):
        parse_since("-5m", 1e9)
