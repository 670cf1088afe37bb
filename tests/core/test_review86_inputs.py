"""Core inputs:

1. ``parse_duration("+5")`` was 5 s (``float()`` reads a sign), while ``+5m``, ``+1h30m`` and
   ``+01:00:00`` were "not a duration": a duration takes no ``+`` in any of its forms now,
   and the error says to write it without one. A ``+`` stays the mark of a delay in
   ``parse_time`` (which takes one off first; ``++1`` stays refused), and ``parse_since``
   still calls it the future.
2. ``load_spec(None)`` / ``load_spec_data(5)`` (a bare TypeError of ``Path()``; 5 would have
   been opened as file descriptor 5 had it got that far) and ``loads_spec(None)`` (a bare
   AttributeError of the YAML reader) are SpecErrors naming the argument.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import load_spec, load_spec_data, loads_spec, parse_spec
from danlu.core.units import parse_duration, parse_since, parse_time

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "bare"),
    [
        ("+5", "5"),
        (" +5 ", "5"),
        ("+ 5", "5"),
        ("+1.5", "1.5"),
        ("+5m", "5m"),
        ("+1h30m", "1h30m"),
        ("+01:00:00", "01:00:00"),
        ("+1-12", "1-12"),
        ("+1e3", "1e3"),
    ],
)
def test_a_duration_with_a_plus_is_refused_saying_to_drop_it(text: str, bare: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_duration(text, "--timeout")
    assert caught.value.field == "--timeout"
    assert f"has a '+': a duration is written without one, {bare};" in str(caught.value)
    assert parse_duration(bare) >= 0  # what it says to write is read


@pytest.mark.parametrize("text", ["+", "+x", "++5", "+-5", "+ +5"])
def test_a_plus_before_no_duration_is_no_duration(text: str) -> None:
    with pytest.raises(SpecError, match="is not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(("text", "seconds"), [("5", 5.0), ("5m", 300.0), ("-5", -5.0)])
def test_durations_without_a_plus_read_as_before(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds  # -5: the caller checks the range, as before


@pytest.mark.parametrize(("text", "delay"), [("+5", 5.0), ("+ 5", 5.0), ("+5m", 300.0)])
def test_a_delay_still_takes_one_plus(text: str, delay: float) -> None:
    assert parse_time(text, NOW) == NOW + delay


def test_two_plus_signs_stay_refused_as_before() -> None:
    with pytest.raises(SpecError, match="more than one '\\+'"):
        parse_time("++5", NOW, "at")


def test_since_still_calls_a_plus_the_future() -> None:
    with pytest.raises(SpecError, match="in the future"):
        parse_since("+5", NOW)


def test_a_spec_duration_with_a_plus_names_its_field() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "a", "command": ["true"], "time_limit": "+5"})
    assert caught.value.field == "time_limit"
    assert "has a '+'" in str(caught.value)


@pytest.mark.parametrize("path", [None, 5, ["spec.yaml"]])
def test_a_spec_path_that_is_no_path_is_named(path: Any) -> None:
    for load in (load_spec, load_spec_data):
        with pytest.raises(SpecError) as caught:
            load(path)
        assert caught.value.field == "path"


def test_a_spec_path_as_text_or_path_still_loads(tmp_path: Path) -> None:
    file = tmp_path / "spec.yaml"
    file.write_text("name: a\ncommand: [python]\n")
    assert load_spec(file).name == load_spec(str(file)).name == "a"


@pytest.mark.parametrize("text", [None, b"name: a\n", 5])
def test_spec_text_that_is_no_string_is_named(text: Any) -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec(text)
    assert caught.value.field == "text"
