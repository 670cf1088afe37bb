"""A date at the edge of what ``datetime`` holds, read as a local time (``--since``, ``--at``):
a one-line error naming the flag, not a ``ValueError`` traceback."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from danlu.core.errors import SpecError
from danlu.core.units import parse_since, parse_time

NOW = 1_796_342_400.0  # 2026-12-04T00:00:00Z

Parser = Callable[[str, float, str], float]


@pytest.mark.parametrize("parse", [parse_since, parse_time], ids=["since", "time"])
@pytest.mark.parametrize("text", ["0001-01-01", "0001-01-01T00:00", " 0001-01-01T00:00:00 "])
def test_year_one_without_an_offset_is_a_spec_error(parse: Parser, text: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse(text, NOW, "--since")
    assert caught.value.field == "--since"
    assert "too far from today" in caught.value.message
    assert "Z" in caught.value.message  # the fix: give the time an offset


@pytest.mark.parametrize("parse", [parse_since, parse_time], ids=["since", "time"])
def test_year_one_with_an_offset_is_still_read(parse: Parser) -> None:
    """With an offset no local time is needed: the moment is read, and, being before 1970,
    is the epoch (the API refuses a since or an at below 0)."""
    assert parse("0001-01-01T00:00Z", NOW, "--since") == 0.0


def test_an_ordinary_date_is_unchanged() -> None:
    assert parse_since("2026-12-01T00:00Z", NOW, "--since") == 1_796_083_200.0
    assert parse_time("2026-12-05T00:00+00:00", NOW, "--at") == NOW + 86_400
