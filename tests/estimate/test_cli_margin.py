"""``danlu estimate --margin``: a size or a share of the limit."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.units import GiB
from danlu.estimate.report import margin_bytes_of as _margin_bytes


def test_margin_is_a_share_of_the_limit_or_a_size() -> None:
    assert _margin_bytes("5%", 80 * GiB) == 4 * GiB
    assert _margin_bytes("0%", 80 * GiB) == 0
    assert _margin_bytes("2GiB", 80 * GiB) == 2 * GiB


@pytest.mark.parametrize("bad", ["abc%", "100%", "-1%", "lots"])
def test_bad_margins_name_the_flag(bad: str) -> None:
    with pytest.raises(SpecError) as info:
        _margin_bytes(bad, 80 * GiB)
    assert info.value.field == "--margin"


@pytest.mark.parametrize("share", ["100%", "150%", "-1%"])
def test_a_share_out_of_range_says_the_range_not_that_it_is_no_percentage(share: str) -> None:
    """``100%`` was refused as "not a percentage", which it is."""
    with pytest.raises(SpecError) as info:
        _margin_bytes(share, 80 * GiB)
    assert "is not a percentage" not in info.value.message
    assert "from 0% up to below 100%" in info.value.message


@pytest.mark.parametrize("bad", ["abc%", "nan%", "inf%", "%"])
def test_a_share_that_is_no_number_is_no_percentage(bad: str) -> None:
    with pytest.raises(SpecError) as info:
        _margin_bytes(bad, 80 * GiB)
    assert "is not a percentage; write e.g. 5%" in info.value.message
