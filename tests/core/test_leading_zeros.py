"""Numbers written with thousands of leading zeros read as the number they write, as one
with a few does (``01GiB`` is 1 GiB): ``int()`` counts leading zeros against its 4,300
digits (``sys.get_int_max_str_digits()``), and a size, a clock field or a GPU count with
more was a bare ``ValueError`` (a traceback from ``--fake-gpus`` or ``--at``; pydantic's
"Exceeds the limit" in a spec's error)."""

from __future__ import annotations

import sys

import pytest

from danlu.core.errors import ConfigError, SpecError
from danlu.core.fake_gpus import parse_fake_gpus
from danlu.core.spec import parse_spec
from danlu.core.units import GiB, parse_bytes, parse_duration, parse_time

ZEROS = "0" * (sys.get_int_max_str_digits() + 10)
NOW = 1_796_342_400.0  # 2026-12-04T00:00:00Z


def test_a_size_with_many_leading_zeros_is_read() -> None:
    assert parse_bytes(f"{ZEROS}1GiB") == GiB
    assert parse_bytes(f"{ZEROS}1.5GiB") == GiB * 3 // 2
    assert parse_bytes("01GiB") == GiB  # as before


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(f"{ZEROS}1:00", 60.0), (f"1:{ZEROS}1:00", 3660.0), (f"{ZEROS}1-{ZEROS}2", 93_600.0)],
    ids=["MM:SS", "HH:MM:SS", "D-HH"],
)
def test_clock_fields_with_many_leading_zeros_are_read(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_delay_with_many_leading_zeros_is_read() -> None:
    assert parse_time(f"+{ZEROS}1:00:00", NOW, "--at") == NOW + 3600
    with pytest.raises(SpecError, match="ambiguous") as caught:
        parse_time(f"+{ZEROS}2:00", NOW, "--at")
    assert caught.value.field == "--at"


def test_a_fake_gpu_size_with_many_leading_zeros_is_read() -> None:
    (group,) = parse_fake_gpus(f"4x{ZEROS}80GiB")
    assert (group.count, group.gpu_type.memory) == (4, 80 * GiB)
    with pytest.raises(ConfigError, match="too large"):
        parse_fake_gpus(f"4x{ZEROS}9{'0' * 30}GiB")


def test_a_gpu_count_with_many_leading_zeros_is_read() -> None:
    spec = parse_spec({"name": "a", "command": ["x"], "resources": {"gpus": f"{ZEROS}2"}})
    assert (spec.resources.gpus.min, spec.resources.gpus.max) == (2, 2)
    ranged = {"gpus": f"{ZEROS}1..{ZEROS}4"}
    spec = parse_spec({"name": "a", "command": ["x"], "resources": ranged})
    assert (spec.resources.gpus.min, spec.resources.gpus.max) == (1, 4)
