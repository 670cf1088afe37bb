"""Core inputs: ``--since``/``--at`` text that is neither a duration nor a time
says why it is no duration when it was meant as one (``1d1d`` spoke of dates only), a
``tpe`` sweep refuses a value its ``values`` list repeats (as a grid does).

A number given as text with ``_`` separators (``priority: "1_000"``, also YAML 1.2's
unquoted ``1_000``) is still read as the number: a stored sweep's trial spec is checked
again at each trial, and refusing it now would fail sweeps already accepted."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.sweep import parse_sweep
from danlu.core.units import parse_duration, parse_since, parse_time

NOW = 1_800_000_000.0
UNIT_TWICE = "(it gives the unit 'd' twice; write each unit once, e.g. 1d12h or 2d)"

# 1. a duration that is wrong was read as a date, and the error spoke of dates only


SINCE_ERRORS = [
    ("1d1d", f"'1d1d' is neither a duration {UNIT_TWICE} nor a time; "),
    ("1_000s", "'1_000s' is neither a duration (it has '_' separators: write ASCII digits "),
    ("1_000", "'1_000' is neither a duration (it is not a plain number: write ASCII "),
    ("1:00:00:00", "'1:00:00:00' is neither a duration (it has four clock fields"),
    ("5x", "'5x' is neither a duration nor a time; write a duration back from now"),
    ("1h30", "'1h30' is neither a duration nor a time; "),
    ("-5m", "'-5m' is not a duration of 0 or more; write a duration back from now"),
    ("-5", "'-5' is not a duration of 0 or more; "),
    ("2026-13-01", "'2026-13-01' is not a time (month must be in 1..12); "),
    ("yesterday", "'yesterday' is not a time; write a duration back from now"),
]


@pytest.mark.parametrize(("text", "start"), SINCE_ERRORS, ids=[t for t, _ in SINCE_ERRORS])
def test_since_says_which_reading_failed_and_why(text: str, start: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_since(text, NOW, "--since")
    assert caught.value.field == "--since"
    assert caught.value.message.startswith(start)


TIME_ERRORS = [
    ("1d1d", f"'1d1d' is neither a delay {UNIT_TWICE} nor a time; write a time, "),
    ("+1d1d", f"'+1d1d' is neither a delay {UNIT_TWICE} nor a time; "),
    ("+1_000s", "'+1_000s' is neither a delay (it has '_' separators"),
    ("5x", "'5x' is neither a delay nor a time; "),
    ("+soon", "'+soon' is neither a delay nor a time; "),
    ("-5m", "'-5m' is not a delay of 0 or more; "),
    ("+-1h", "'+-1h' is not a delay of 0 or more; "),
    ("2026-12-04T25:00", "'2026-12-04T25:00' is not a time (hour must be in 0..23); "),
    ("soon", "'soon' is not a time; write a time, "),
]


@pytest.mark.parametrize(("text", "start"), TIME_ERRORS, ids=[t for t, _ in TIME_ERRORS])
def test_a_time_says_which_reading_failed_and_why(text: str, start: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_time(text, NOW, "--at")
    assert caught.value.field == "--at"
    assert caught.value.message.startswith(start)


def test_every_form_of_since_and_time_still_reads() -> None:
    local = datetime(2026, 12, 4).astimezone().timestamp()
    assert parse_since("2026-12-04", NOW) == local  # an ISO date, dashes and all
    assert parse_since(" 1h30m ", NOW) == NOW - 5400
    assert parse_since("2d", NOW) == NOW - 172_800
    assert parse_since("90", NOW) == NOW - 90
    assert parse_since("2026-12-04T02:00Z", NOW) == 1_796_349_600.0
    assert parse_since("12:30", NOW) <= NOW  # the last 12:30, a time of day
    assert parse_time("12:30", NOW) >= NOW  # the next one
    assert parse_time("+1h", NOW) == NOW + 3600
    assert parse_time("1d12h", NOW) == NOW + 129_600
    assert parse_time("2027-01-01T00:00Z", NOW) == 1_798_761_600.0


def test_a_duration_with_separators_and_units_names_them() -> None:
    with pytest.raises(SpecError) as caught:
        parse_duration("1_000s", "time_limit")
    assert caught.value.field == "time_limit"
    assert caught.value.message.startswith(
        "'1_000s' has '_' separators: write ASCII digits without them, e.g. 1000s; write "
    )


# 2. a tpe sweep took a value listed twice; Optuna tells its choices apart with ==

TPE: dict[str, Any] = {
    "name": "s",
    "trial": {"command": ["true"]},
    "method": "tpe",
    "trials": 8,
    "metric": {"name": "loss"},
}


@pytest.mark.parametrize(
    ("values", "start"),
    [
        (["adam", "sgd", "adam"], "'adam' is listed twice: tpe's sampler (Optuna) tells"),
        ([0.1, 0.01, 0.1], "0.1 is listed twice: "),
        ([1, 1.0], "1.0 is listed twice (1, 1.0): "),
        ([1, True], "True is listed twice (1, True): "),  # True == 1 to Optuna as well
    ],
    ids=["text", "float", "int-and-float", "int-and-bool"],
)
def test_a_tpe_value_listed_twice_is_refused_naming_the_parameter(
    values: list[Any], start: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_sweep({**TPE, "parameters": {"opt": {"values": values}}})
    assert caught.value.field == "parameters.opt.values"
    assert caught.value.message.startswith(start)
    assert caught.value.message.endswith("; list each value once")


def test_distinct_tpe_values_are_kept() -> None:
    spec = parse_sweep({**TPE, "parameters": {"x": {"values": [1, "1", 1.5, False]}}})
    assert spec.parameters["x"].values == [1, "1", 1.5, False]
