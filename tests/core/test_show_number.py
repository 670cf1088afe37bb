"""How an error message shows a huge integer: its magnitude, right to the last power of 10."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import parse_spec
from danlu.core.values import show_number


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (10**24 - 1, "9.99e+23"),  # log10 rounds it up to 24: was "0.99e+24"
        (-(10**24 - 1), "-9.99e+23"),
        (10**40 - 1, "9.99e+39"),
        (10**24, "1e+24"),
        (10**21, "1e+21"),
        (123_456_789 * 10**20, "1.23e+28"),
        (10**5000 - 1, "9.99e+4999"),
        (10**5000, "1e+5000"),
    ],
    ids=lambda item: item if isinstance(item, str) else "",  # repr() of 10**5000 raises
)
def test_a_huge_integer_is_shown_by_its_magnitude(value: int, shown: str) -> None:
    assert show_number(value) == shown


def test_every_power_of_ten_and_the_number_below_it() -> None:
    for k in range(22, 400):
        assert show_number(10**k) == f"1e+{k}"
        assert show_number(10**k - 1) == f"9.99e+{k - 1}"


def test_the_message_of_a_priority_of_24_nines() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "a", "command": ["x"], "priority": 10**24 - 1})
    assert caught.value.field == "priority"
    assert caught.value.message.endswith("(got 9.99e+23)")
