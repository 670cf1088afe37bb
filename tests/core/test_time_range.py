"""``--since`` and ``--at`` give moments the API takes: one before 1970 is the epoch (the
API refused a since or an at below 0, with a 422 about a value never written), one past the
year 9999 is refused locally naming the flag (the API blamed a time in milliseconds)."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.metric_record import MAX_TIME
from danlu.core.units import parse_since, parse_time

NOW = 1_796_342_400.0  # 2026-12-04T00:00:00Z


@pytest.mark.parametrize(
    "text", ["1960-01-01T00:00Z", "1969-12-31T23:59:59+00:00", "30000d", "1e300", "inf", "1e400"]
)
def test_since_before_1970_is_the_epoch(text: str) -> None:
    assert parse_since(text, NOW, "--since") == 0.0


def test_since_within_the_epoch_is_unchanged() -> None:
    assert parse_since("1970-01-01T00:00:01Z", NOW, "--since") == 1.0
    assert parse_since("1d", NOW, "--since") == NOW - 86_400


def test_since_nan_is_still_refused() -> None:
    with pytest.raises(SpecError) as caught:
        parse_since("nan", NOW, "--since")
    assert caught.value.field == "--since"


@pytest.mark.parametrize(
    "text", ["+1e20", "+3000000d", "+inf", "inf", "1e400", "9999-12-31T23:59:59-14:00"]
)
def test_a_time_past_the_year_9999_is_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_time(text, NOW, "--at")
    assert caught.value.field == "--at"
    assert "past the year 9999" in caught.value.message


def test_a_time_just_within_the_year_9999_is_read() -> None:
    assert parse_time("9999-12-31T23:59:59Z", NOW, "--at") == MAX_TIME - 1
    assert parse_time("+2h", NOW, "--at") == NOW + 7200


@pytest.mark.parametrize("text", ["1960-01-01T00:00Z", "1969-12-31T23:59:59+00:00"])
def test_a_time_before_1970_is_the_epoch(text: str) -> None:
    """A past time is done now, as any past --at; 0 is what the API takes for one."""
    assert parse_time(text, NOW, "--at") == 0.0
