"""``danlu estimate --margin``: a size or a share of the limit."""

from __future__ import annotations

import pytest

from danlu.cli.estimate import _margin_bytes
from danlu.core.errors import SpecError
from danlu.core.units import GiB


def test_margin_is_a_share_of_the_limit_or_a_size() -> None:
    assert _margin_bytes("5%", 80 * GiB) == 4 * GiB
    assert _margin_bytes("0%", 80 * GiB) == 0
    assert _margin_bytes("2GiB", 80 * GiB) == 2 * GiB


@pytest.mark.parametrize("bad", ["abc%", "100%", "-1%", "lots"])
def test_bad_margins_name_the_flag(bad: str) -> None:
    with pytest.raises(SpecError) as info:
        _margin_bytes(bad, 80 * GiB)
    assert info.value.field == "--margin"
