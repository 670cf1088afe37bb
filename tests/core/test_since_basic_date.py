"""``--since`` (danlu.core.units.parse_since) refuses eight bare digits that make a date
``YYYYMMDD`` (ISO 8601's basic date, ``20261204``): read as seconds back they gave a moment
234 days ago, while a date was almost surely meant. The message gives both spellings; every
other form reads as before."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.units import parse_since, parse_time

NOW = 1_796_342_400.0  # 2026-12-04T00:00:00Z


@pytest.mark.parametrize(
    ("text", "date"),
    [
        ("20261204", "2026-12-04"),
        (" 20261201 ", "2026-12-01"),
        ("20240229", "2024-02-29"),
        ("19700101", "1970-01-01"),
        ("10000101", "1000-01-01"),
    ],
)
def test_eight_digits_that_make_a_date_are_refused(text: str, date: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_since(text, NOW, "--since")
    assert caught.value.field == "--since"
    message = caught.value.message
    assert "ambiguous" in message
    assert f"write {date} for the date, or {text.strip()}s for seconds" in message


@pytest.mark.parametrize("text", ["20261204", "20240229"])
def test_both_suggested_spellings_read(text: str) -> None:
    as_seconds = parse_since(f"{text}s", NOW, "--since")
    assert as_seconds == NOW - int(text)
    as_date = parse_since(f"{text[:4]}-{text[4:6]}-{text[6:]}T00:00Z", NOW, "--since")
    assert as_date <= NOW


@pytest.mark.parametrize(
    "text",
    [
        "90",
        "1234567",  # seven digits
        "123456789",  # nine digits
        "99999999",  # month 99: no date
        "20261304",  # month 13
        "20250229",  # no 29 February in 2025
        "20261232",  # day 32
        "00000101",  # year 0
        "20261204.0",  # a decimal number
    ],
)
def test_other_bare_numbers_are_still_seconds(text: str) -> None:
    assert parse_since(text, NOW, "--since") == NOW - float(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800.0), ("1h30m", 5400.0), ("1-12", 129_600.0), ("2d", 172_800.0)],
)
def test_durations_are_unchanged(text: str, seconds: float) -> None:
    assert parse_since(text, NOW, "--since") == NOW - seconds


def test_a_dated_time_is_unchanged() -> None:
    assert parse_since("2026-12-01T00:00Z", NOW, "--since") == 1_796_083_200.0


@pytest.mark.parametrize(
    ("text", "date"), [("20261205", "2026-12-05"), (" 20270101", "2027-01-01")]
)
def test_a_time_of_eight_digits_that_make_a_date_is_refused_too(text: str, date: str) -> None:
    """``parse_time`` (``--at`` and the like) read the same digits as a delay of 234 days."""
    with pytest.raises(SpecError) as caught:
        parse_time(text, NOW, "--at")
    assert caught.value.field == "--at"
    assert f"write {date} for the date, or +{text.strip()}s for seconds" in caught.value.message


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("+20261204", NOW + 20_261_204),
        ("+20261204s", NOW + 20_261_204),
        ("99999999", NOW + 99_999_999),
    ],
)
def test_a_delay_written_as_one_still_reads(text: str, moment: float) -> None:
    assert parse_time(text, NOW, "--at") == moment
