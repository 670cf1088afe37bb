"""Inputs that reached a raw Python exception or were silently misread: an
``array`` that is not text, durations Python's ``float()`` reads too generously or that
repeat a unit, YAML's ``!!binary`` and ``!!set`` past the store's checks, a state given by
its name, huge or non-finite values shown, empty project and user names, and a grid that
lists a value twice."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from danlu.core.errors import InvalidTransitionError, SpecError
from danlu.core.job import Job
from danlu.core.job_array import ArrayRange, parse_array
from danlu.core.spec import loads_spec, parse_spec
from danlu.core.spec_text import load_yaml
from danlu.core.state import JobState, as_state, check_transition, transition
from danlu.core.sweep import parse_sweep
from danlu.core.units import (
    format_bytes,
    format_duration,
    format_energy,
    parse_duration,
    parse_time,
)
from danlu.core.values import check_values

BASE: dict[str, Any] = {"name": "d", "command": ["true"]}
SWEEP: dict[str, Any] = {"name": "s", "trial": {"command": ["true"]}, "method": "grid"}


# 1. parse_array of what is not text: AttributeError ('int' object has no attribute 'strip')


@pytest.mark.parametrize("value", [[1, 2], True, None, 1.5, b"0-9"])
def test_an_array_that_is_not_text_is_refused_naming_the_field(value: Any) -> None:
    with pytest.raises(SpecError, match="expected an index range as text") as info:
        parse_array(value, "--array")
    assert info.value.field == "--array"


def test_an_array_of_one_whole_number_is_that_index() -> None:
    # a spec's ``array: 7``, which YAML reads as a number
    assert parse_array(7) == ArrayRange((7,), 1)
    with pytest.raises(SpecError, match="index -1 is below 0"):
        parse_array(-1)


# 2. float() read 1_000 as 1000 and other scripts' digits as ASCII ones


@pytest.mark.parametrize("text", ["1_000", "1_0.5", "١٢", "１２", "1_000.5"])
def test_a_duration_that_is_no_plain_number_is_refused(text: str) -> None:
    with pytest.raises(SpecError, match="is not a plain number") as info:
        parse_duration(text, "time_limit")
    assert info.value.field == "time_limit"
    with pytest.raises(SpecError, match="not a plain number") as spec_info:
        parse_spec({**BASE, "time_limit": text})
    assert spec_info.value.field == "time_limit"


@pytest.mark.parametrize(("text", "seconds"), [("1000", 1000.0), (" 1.5 ", 1.5), ("1e3", 1e3)])
def test_plain_numbers_still_read_as_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


# 3. a unit given twice was added up: 1d1d was two days


@pytest.mark.parametrize(("text", "unit"), [("1d1d", "'d'"), ("1h30m1H", "'h'"), ("5s 5s", "'s'")])
def test_a_duration_repeating_a_unit_is_refused_naming_it(text: str, unit: str) -> None:
    with pytest.raises(SpecError, match=f"gives the unit {unit} twice") as info:
        parse_duration(text, "deadline")
    assert info.value.field == "deadline"


def test_units_given_once_in_any_order_still_add_up() -> None:
    assert parse_duration("1d12h") == 129600.0
    assert parse_duration("30m1h") == 5400.0


# 4. YAML's !!binary was read as text by pydantic, past the NUL check; !!set lost its order


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        ("name: x\ncommand: [!!binary AA==]", "command.0"),  # a NUL stored
        ("name: !!binary aGVsbG8=\ncommand: [a]", "name"),
        ("name: x\ncommand: [a]\nenv: {A: !!binary AA==}", "env.A"),
        ("name: x\ncommand: [a]\nenv: {!!binary QQ==: a}", "env"),
    ],
)
def test_binary_yaml_values_in_a_job_spec_are_refused_naming_the_field(
    yaml_text: str, field: str
) -> None:
    with pytest.raises(SpecError, match=r"binary data \(YAML's !!binary\)") as info:
        loads_spec(yaml_text)
    assert info.value.field == field


def test_a_yaml_set_is_refused_as_it_keeps_no_order() -> None:
    with pytest.raises(SpecError, match=r"is a set .*write a list") as info:
        loads_spec("name: x\ncommand: !!set {python, train.py, --lr}")
    assert info.value.field == "command"


def test_binary_yaml_values_in_a_sweep_are_refused_naming_the_field() -> None:
    data = load_yaml(
        "name: s\ntrial: {command: [a]}\nmethod: grid\n"
        "parameters: {opt: {values: [!!binary YWRhbQ==, sgd]}}"
    )
    with pytest.raises(SpecError, match="binary data") as info:
        parse_sweep(data)
    assert info.value.field == "parameters.opt.values.0"


def test_check_values_refuses_bytes_and_sets() -> None:
    with pytest.raises(SpecError, match="binary data") as info:
        check_values({"reason": b"x"})
    assert info.value.field == "reason"
    with pytest.raises(SpecError, match="is a set"):
        check_values({"tags": {"a"}})


# 5. transition() stored the state's name as given (a str), not the JobState


@dataclass
class Thing:
    id: str
    state: JobState


def test_transition_stores_the_state_given_by_its_name_as_the_enum() -> None:
    thing = Thing("j1", JobState.PENDING)
    event = transition(thing, "RUNNING", "started", 1.0)
    assert thing.state is JobState.RUNNING
    assert event.old is JobState.PENDING and event.new is JobState.RUNNING


def test_job_move_by_a_states_name_keeps_its_bookkeeping() -> None:
    job = Job("j1", parse_spec(BASE), submit_time=0.0)
    job.move("RUNNING", "started", 5.0)  # as a caller holding the name gives it
    job.move("SUCCEEDED", "done", 9.0)
    assert job.state is JobState.SUCCEEDED
    assert (job.start_time, job.end_time, job.jct) == (5.0, 9.0, 9.0)


def test_an_unknown_state_name_is_an_invalid_transition_listing_the_states() -> None:
    with pytest.raises(InvalidTransitionError, match=r"'DONE' is not a job state.*RUNNING"):
        transition(Thing("j1", JobState.RUNNING), "DONE", "r", 0.0)
    with pytest.raises(InvalidTransitionError, match="'BOGUS' is not a job state"):
        check_transition("BOGUS", JobState.RUNNING)
    assert as_state("FAILED") is JobState.FAILED


# 6. format_duration(1e308) spelled out 300 digits of days; an integer past a float's
# range raised OverflowError; format_bytes(nan) was "nanTiB"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (1e308, "1.16e+303d"),
        (10**400, "1.15e+395d"),
        (1e20, "1.16e+15d"),
        (99_999 * 86400 + 23 * 3600, "99999d23h"),  # below the limit: spelled out
        (float("inf"), "infs"),
        (float("nan"), "nans"),
        (float("-inf"), "0s"),  # as any negative duration (was "-infs")
    ],
)
def test_format_duration_shows_a_huge_duration_by_its_magnitude(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (1e308, "9.09e+295TiB"),
        (2**70, "1.07e+09TiB"),
        (10**400, "9.09e+387TiB"),
        (2**62, "4194304.0TiB"),  # MAX_BYTES, the largest a spec takes: as before
    ],
)
def test_format_bytes_shows_non_finite_and_huge_sizes_sensibly(size: float, shown: str) -> None:
    assert format_bytes(size) == shown


@pytest.mark.parametrize(
    ("joules", "shown"),
    [(1e308, "2.78e+298 MWh"), (-3.6e20, "-1e+11 MWh"), (3.6e15, "1000000 MWh")],
)
def test_format_energy_shows_a_huge_energy_by_its_magnitude(joules: float, shown: str) -> None:
    assert format_energy(joules) == shown  # 1e308 J spelled out 299 digits of MWh


def test_an_ambiguous_delay_of_thousands_of_digits_is_a_spec_error() -> None:
    # int() of 5,000 digits raised ValueError, one of 400 OverflowError in format_duration
    for digits in (5000, 400):
        with pytest.raises(SpecError) as info:
            parse_time("+" + "9" * digits + ":00", time.time(), "--begin")
        assert info.value.field == "--begin"


# 7. an empty project or user was accepted (the server then found no such project)


@pytest.mark.parametrize("field", ["project", "user"])
@pytest.mark.parametrize("name", ["", "   "])
def test_an_empty_project_or_user_is_refused_naming_the_field(field: str, name: str) -> None:
    with pytest.raises(SpecError, match=f"names no {field}.*leave {field} out") as info:
        parse_spec({**BASE, field: name})
    assert info.value.field == field
    assert getattr(parse_spec({**BASE, field: name}, stored=True), field) == name  # as stored


# 8. a grid listing a value twice ran the same trials twice


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([0.1, 0.01, 0.1], "0.1 is listed twice"),
        (["adam", "sgd", "adam"], "'adam' is listed twice"),
        ([1, 1.0], r"1.0 is listed twice \(1, 1.0\)"),
    ],
)
def test_a_grid_value_listed_twice_is_refused_naming_the_parameter(
    values: list[Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message) as info:
        parse_sweep({**SWEEP, "parameters": {"lr": {"values": values}}})
    assert info.value.field == "parameters.lr.values"


def test_distinct_grid_values_and_random_repeats_are_kept() -> None:
    grid = parse_sweep({**SWEEP, "parameters": {"x": {"values": [True, 1, "1", 1.5]}}})
    assert grid.total == 4  # a boolean, a number and text are different values
    weighted = {**SWEEP, "method": "random", "trials": 3}
    spec = parse_sweep({**weighted, "parameters": {"opt": {"values": ["adam", "adam", "sgd"]}}})
    assert spec.parameters["opt"].values == ["adam", "adam", "sgd"]  # drawn twice as often
