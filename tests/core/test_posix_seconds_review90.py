"""A bare number of ten digits or more given to ``--since`` or ``--at`` is refused as
ambiguous: ``date +%s`` prints a POSIX time so, which read as that many seconds (``--at
1796342400``: a drain 56 years away; ``--since 1796342400``: the epoch)."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.units import parse_since, parse_time

NOW = 1_796_342_400.0  # 2026-12-04T00:00:00Z


@pytest.mark.parametrize("text", ["1796342400", " 1796342400.5 ", "0001796342400"])
def test_posix_time_is_ambiguous_for_at(text: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_time(text, NOW, "--at")
    assert caught.value.field == "--at"
    assert "ambiguous" in caught.value.message
    assert "2026-12-04T00:00:00Z" in caught.value.message
    assert f"+{text.strip()}s" in caught.value.message


@pytest.mark.parametrize(
    "text", ["1796342400", "1796342400000", pytest.param("9" * 5000, id="5000-digits")]
)
def test_posix_time_is_ambiguous_for_since(text: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_since(text, NOW, "--since")
    assert caught.value.field == "--since"
    assert "ambiguous" in caught.value.message
    assert len(caught.value.message) < 400


def test_the_suggested_forms_are_read() -> None:
    """Both spellings the message offers mean what they say."""
    assert parse_time("2026-12-04T00:00:00Z", NOW - 60, "--at") == NOW
    assert parse_time("+1796342400s", NOW, "--at") == 2 * NOW
    assert parse_time("+1796342400", NOW, "--at") == 2 * NOW  # a '+': a delay, as before
    assert parse_since("1796342400s", NOW, "--since") == 0.0


@pytest.mark.parametrize("text", ["999999999", "90", "1e9", "30000d"])
def test_shorter_numbers_and_other_forms_are_still_durations(text: str) -> None:
    assert parse_since(text, NOW, "--since") == max(0.0, NOW - parse_time(text, 0, "--at"))
