"""``parse_time`` took ``++1`` (a sign too many) as a delay of one second: it stripped one
``+`` and ``float()`` read the rest, ``+1``. A second ``+`` is refused naming the field; one
``+`` before a delay, and the forms refused before (``+-1``, ``1_000``, other scripts'
digits), are read as they were."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.units import parse_duration, parse_since, parse_time

NOW = 1_800_000_000.0


@pytest.mark.parametrize("text", ["++1", "++90", " ++1h", "+ +1", "+++5m", "++1e3", "++"])
def test_a_delay_with_two_plus_signs_is_refused(text: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_time(text, NOW, "at")
    assert caught.value.field == "at"
    assert "more than one '+'" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "delay"), [("+1", 1.0), ("+90m", 5400.0), (" +1h30m ", 5400.0), ("90", 90.0)]
)
def test_one_plus_sign_is_read_as_before(text: str, delay: float) -> None:
    assert parse_time(text, NOW) == NOW + delay


@pytest.mark.parametrize("text", ["+-1", "+-5m", "+1_000", "+\u0661\u0662", "+\uff11h"])
def test_other_signed_or_lax_delays_stay_refused(text: str) -> None:
    with pytest.raises(SpecError):
        parse_time(text, NOW)


@pytest.mark.parametrize("text", ["++1", "--1", "+-1", "1_000", "\u0661\u0662"])
def test_since_refuses_them_too(text: str) -> None:
    with pytest.raises(SpecError):
        parse_since(text, NOW)


@pytest.mark.parametrize("text", ["++1", "--1", "+-1", "1_0", "\u0661", "\uff11h"])
def test_a_duration_refuses_them_too(text: str) -> None:
    with pytest.raises(SpecError):
        parse_duration(text, "time_limit")
