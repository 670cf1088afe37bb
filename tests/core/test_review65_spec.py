"""Job spec errors. A number, boolean or date YAML read in ``command``, an ``env``
value or a ``resources.gpu_type`` item says to quote it, naming the item (pydantic said only
that a string was expected); a bare ``gpu_memory`` or ``memory`` below 1 MiB (bytes, as a
number without a unit is) or a fraction of a byte is refused saying to give a unit; a GPU
count below 1 is refused by the spec itself with the admission's words; a job array's task
spec setting ``DANLU_ARRAY_INDEX`` is told the job array sets it."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.job_array import array_sweep, parse_array
from danlu.core.spec import loads_spec, parse_spec
from danlu.core.sweep import parse_sweep
from danlu.core.units import GiB, MiB

BASE = "name: a\ncommand: [echo]\n"
JOB: dict[str, Any] = {"name": "a", "command": ["echo"]}

# -- 1. numbers, booleans and dates where a list item or an env value is text ---------------------


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (
            "name: a\ncommand: [python, train.py, --lr, 0.1]\n",
            "command.3",
            "0.1 was read as a number, not text: quote it, '0.1'",
        ),
        ("name: a\ncommand: [echo, yes]\n", "command.1", "was read as a boolean"),
        (BASE + "env: {SEED: 1}\n", "env.SEED", "1 was read as a number, not text: quote it, '1'"),
        (BASE + "env: {DEBUG: yes}\n", "env.DEBUG", "was read as a boolean"),
        (BASE + "env: {DAY: 2024-01-01}\n", "env.DAY", "2024-01-01 was read as a date"),
        (
            BASE + "resources: {gpu_type: [A100, 3090]}\n",
            "resources.gpu_type.1",
            "3090 was read as a number, not text: quote it, '3090'",
        ),
        (
            BASE + "resources: {gpu_type: 3090}\n",
            "resources.gpu_type",
            "3090 was read as a number, not text: quote it, gpu_type: '3090'",
        ),
    ],
    ids=["command-float", "command-bool", "env-int", "env-bool", "env-date", "type-item", "type"],
)
def test_a_number_or_boolean_where_text_goes_says_to_quote_it_naming_the_item(
    text: str, field: str, words: str
) -> None:
    with pytest.raises(SpecError) as info:
        loads_spec(text)
    assert info.value.field == field
    assert words in info.value.message
    assert "valid string" not in info.value.message


def test_a_boolean_item_shows_the_quoted_form() -> None:
    with pytest.raises(SpecError) as info:
        loads_spec(BASE + "env: {DEBUG: yes}\n")
    assert "quote the text, e.g. 'yes'" in info.value.message


def test_json_numbers_in_command_and_env_are_refused_too() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**JOB, "command": ["python", "train.py", 3]})
    assert info.value.field == "command.2" and "quote it, '3'" in info.value.message
    with pytest.raises(SpecError) as info:
        parse_spec({**JOB, "env": {"SEED": 7}})
    assert info.value.field == "env.SEED" and "quote it, '7'" in info.value.message


def test_quoted_items_are_text() -> None:
    spec = loads_spec(
        "name: a\ncommand: [python, train.py, --lr, '0.1']\n"
        "env: {SEED: '1', DEBUG: 'yes'}\nresources: {gpu_type: [A100, '3090']}\n"
    )
    assert spec.command[3] == "0.1"
    assert spec.env == {"SEED": "1", "DEBUG": "yes"}
    assert spec.resources.gpu_type == ["A100", "3090"]


# -- 2. a size without a unit is bytes: below 1 MiB it was meant in another unit ------------------


@pytest.mark.parametrize(
    ("value", "example"),
    [(24, "24GiB"), ("24", "24GiB"), (1000, "24GiB"), ("512KiB", "24GiB"), (MiB - 1, "24GiB")],
    ids=["24", "text-24", "1000", "512KiB", "just-below"],
)
@pytest.mark.parametrize("field", ["gpu_memory", "memory"])
def test_a_size_below_one_mib_is_refused_saying_to_give_a_unit(
    field: str, value: int | str, example: str
) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**JOB, "resources": {"gpus": 1, field: value}})
    assert info.value.field == f"resources.{field}"
    assert "below 1 MiB" in info.value.message
    assert "give the size a unit" in info.value.message and example in info.value.message


@pytest.mark.parametrize("value", [0.5, "0.5", 24.5, "1.5"], ids=["0.5", "text-0.5", "24.5", "1.5"])
@pytest.mark.parametrize("field", ["gpu_memory", "memory"])
def test_a_fraction_of_a_byte_is_refused_saying_to_give_a_unit(
    field: str, value: float | str
) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**JOB, "resources": {"gpus": 1, field: value}})
    assert info.value.field == f"resources.{field}"
    assert "fraction of a byte" in info.value.message
    assert f"give the size a unit, e.g. {value}GiB" in info.value.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (24 * GiB, 24 * GiB),  # what `danlu submit` sends: the size in bytes
        (MiB, MiB),
        (float(24 * GiB), 24 * GiB),
        ("24GiB", 24 * GiB),
        ("0.5GiB", GiB // 2),
        (0, 0),  # none asked for (the whole GPU; no host memory reserved)
    ],
    ids=["bytes", "one-mib", "float-bytes", "24GiB", "0.5GiB", "zero"],
)
@pytest.mark.parametrize("field", ["gpu_memory", "memory"])
def test_sizes_in_bytes_or_with_a_unit_are_accepted(
    field: str, value: int | float | str, expected: int
) -> None:
    spec = parse_spec({**JOB, "resources": {"gpus": 1, field: value}})
    assert getattr(spec.resources, field) == expected


def test_a_stored_spec_with_a_small_size_is_still_read() -> None:
    """A job accepted before the check came in is read as it was stored."""
    stored = parse_spec({**JOB, "resources": {"gpu_memory": 24, "memory": 16}}, stored=True)
    assert (stored.resources.gpu_memory, stored.resources.memory) == (24, 16)


def test_gpu_memory_auto_is_unaffected() -> None:
    assert parse_spec({**JOB, "resources": {"gpu_memory": "auto"}}).resources.gpu_memory == "auto"


# -- 3. a GPU count below 1 ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "got"),
    [(0, "0"), (-1, "-1"), ("0", "0"), ("0..4", "0..4"), ({"min": 0, "max": 2}, "0..2")],
    ids=["zero", "negative", "text-zero", "range-from-zero", "mapping-from-zero"],
)
def test_a_gpu_count_below_one_is_refused_with_one_message(gpus: Any, got: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**JOB, "resources": {"gpus": gpus}})
    assert info.value.field == "resources.gpus"
    assert info.value.message == f"danlu schedules GPU jobs: ask for 1 GPU or more (got {got})"


@pytest.mark.parametrize("gpus", [1, "1..4", {"min": 2, "max": 2}], ids=["one", "range", "map"])
def test_a_gpu_count_of_one_or_more_is_accepted(gpus: Any) -> None:
    assert parse_spec({**JOB, "resources": {"gpus": gpus}}).resources.gpus.min >= 1


# -- 4. a job array's task spec setting DANLU_ARRAY_INDEX ------------------------------------------


def test_a_job_array_names_the_env_variable_it_sets() -> None:
    job = {**JOB, "env": {"DANLU_ARRAY_INDEX": "3"}}
    with pytest.raises(SpecError) as info:
        parse_sweep(array_sweep(job, parse_array("0-1")))
    assert info.value.field == "env.DANLU_ARRAY_INDEX"
    assert "job array" in info.value.message and "sweep" not in info.value.message


def test_a_sweep_keeps_its_own_wording() -> None:
    sweep = {
        "name": "s",
        "trial": {"command": ["echo"], "env": {"DANLU_TRIAL": "3"}},
        "parameters": {"lr": {"values": [0.1, 0.2]}},
        "method": "grid",
    }
    with pytest.raises(SpecError) as info:
        parse_sweep(sweep)
    assert info.value.field == "trial.env.DANLU_TRIAL"
    assert info.value.message == "is set by the sweep for every trial"


@pytest.mark.parametrize("field", ["time_limit", "deadline"])
def test_a_duration_beyond_a_century_is_refused(field: str) -> None:
    with pytest.raises(SpecError, match=field) as info:
        parse_spec({"name": "d", "command": ["true"], "resources": {"gpus": 1}, field: 1e308})
    assert "3,155,760,000" in str(info.value)
    spec = parse_spec({"name": "d", "command": ["true"], "resources": {"gpus": 1}, field: "30d"})
    assert getattr(spec, field) == 30 * 86400


def test_an_expected_duration_beyond_a_century_is_refused() -> None:
    with pytest.raises(SpecError, match=r"training\.expected_duration"):
        parse_spec(
            {
                "name": "d",
                "command": ["true"],
                "resources": {"gpus": 1},
                "training": {"expected_duration": 1e12},
            }
        )
