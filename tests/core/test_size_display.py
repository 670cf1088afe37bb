"""``format_bytes`` shows a size without rounding away what matters: one decimal made a quota
of ``1280GiB`` ``1.2TiB`` (51 GiB gone) and ``1.04GiB`` ``1.0GiB``. A size shows the fewest
decimals (one to three) that are its very bytes, else three significant digits;
every display one decimal already showed exactly stays as it was."""

from __future__ import annotations

import pytest

from danlu.core.units import GiB, MiB, format_bytes, parse_bytes

TiB = 1024**4


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (1280 * GiB, "1.25TiB"),  # was 1.2TiB
        (1152 * GiB, "1.125TiB"),  # was 1.1TiB
        (1088 * GiB, "1.06TiB"),  # 1.0625: no text of up to three decimals is exact
        (1100 * MiB, "1.07GiB"),  # 1.0742...: was 1.1GiB
        (int(1.04 * GiB), "1.04GiB"),  # was 1.0GiB
        (2 * GiB + 256 * MiB, "2.25GiB"),  # was 2.2GiB
        (-1280 * GiB, "-1.25TiB"),
        (12_345 * MiB, "12.1GiB"),  # 12.0556...: three significant digits
        (parse_bytes("1.2GiB"), "1.20GiB"),  # 1.2GiB less the fraction of a byte dropped
        (6288, "6.14KiB"),  # 6.140625: not three decimals exactly
        (85_029_615_042, "79.2GiB"),  # an H100's capacity as the estimator has it
    ],
)
def test_a_size_keeps_its_significant_digits(size: int, shown: str) -> None:
    assert format_bytes(size) == shown


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (80 * GiB, "80.0GiB"),
        (1536 * MiB, "1.5GiB"),
        (2 * TiB, "2.0TiB"),
        (int(0.5 * GiB), "512.0MiB"),
        (85_000_000_000, "79.2GiB"),  # an H100's capacity, as the docs show it
        (81_559 * MiB, "79.6GiB"),
        (1000 * GiB, "1000.0GiB"),
    ],
)
def test_what_one_decimal_showed_exactly_is_shown_as_before(size: int, shown: str) -> None:
    assert format_bytes(size) == shown


@pytest.mark.parametrize("text", ["1280GiB", "1.25TiB", "1152GiB", "2.75GiB", "300MiB", "7KiB"])
def test_an_exact_display_reads_back_as_the_same_bytes(text: str) -> None:
    size = parse_bytes(text)
    assert parse_bytes(format_bytes(size)) == size
