"""A date where a duration goes (``deadline: 2026-12-31``, the day it must be done by) is
refused saying that the field is a duration and how to write one: "expected a duration, got
date" left unsaid that a deadline counts from submission."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import loads_spec


@pytest.mark.parametrize(
    ("text", "field", "shown"),
    [
        ("deadline: 2026-12-31", "deadline", "2026-12-31"),
        ("time_limit: 2026-12-31T10:00:00", "time_limit", "2026-12-31 10:00:00"),
        ("training: {expected_duration: 2026-12-31}", "training.expected_duration", "2026-12-31"),
    ],
)
def test_a_date_for_a_duration_says_it_is_a_duration(text: str, field: str, shown: str) -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec("name: a\ncommand: [x]\n" + text)
    assert caught.value.field == field
    assert caught.value.message.startswith(f"{shown} was read as a date, not a duration")
    assert "a deadline counts from submission" in caught.value.message
