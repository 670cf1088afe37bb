"""A key a sweep spec does not know (``paramaters``, ``objectve``, ``paralel``) is refused
naming the field meant, as a job spec's is: the sweep's error said only "check the spelling
against the sweep spec reference", and a misspelt required field (``paramaters``) was told
as the field missing ("parameters: this field is required"), which the user had written."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import loads_spec
from danlu.core.sweep import parse_sweep

SWEEP: dict[str, Any] = {
    "name": "s",
    "trial": {"command": ["python", "train.py"]},
    "parameters": {"lr": {"values": [0.1, 0.2]}},
    "trials": 2,
}


def _sweep_error(**changes: Any) -> SpecError:
    body = {**SWEEP, **changes}
    for key, value in changes.items():
        if value is None:
            del body[key]
    with pytest.raises(SpecError) as caught:
        parse_sweep(body)
    return caught.value


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("paralel", "parallel"),
        ("Parallel", "parallel"),
        ("objectve", "metric"),
        ("objective", "metric"),
        ("metod", "method"),
        ("trails", "trials"),
        ("n_trials", "trials"),
        ("early_terminate", "early_stopping"),
        ("start_trials", "startup_trials"),
        ("sede", "seed"),
    ],
)
def test_a_misspelt_top_level_sweep_key_names_the_field_meant(key: str, meant: str) -> None:
    value = {"name": "loss"} if meant == "metric" else {} if meant == "early_stopping" else 2
    error = _sweep_error(**{key: value})
    assert error.field == key
    assert error.message.startswith(f"unknown field; did you mean {meant}?"), error.message
    assert "sweep spec reference" in error.message


def test_a_misspelt_required_key_is_named_not_the_field_missing() -> None:
    error = _sweep_error(parameters=None, paramaters=SWEEP["parameters"])
    assert error.field == "paramaters"
    assert error.message == (
        "unknown field; did you mean parameters? check the spelling against the sweep spec "
        "reference"
    )


@pytest.mark.parametrize(
    ("changes", "field", "meant"),
    [
        ({"metric": {"name": "loss", "gaol": "maximize"}}, "metric.gaol", "metric.goal"),
        ({"metric": {"name": "loss", "direction": "max"}}, "metric.direction", "metric.goal"),
        ({"metric": {"nme": "loss"}}, "metric.nme", "metric.name"),
        (
            {"metric": {"name": "loss"}, "early_stopping": {"min_step": 5}},
            "early_stopping.min_step",
            "early_stopping.min_steps",
        ),
        ({"parameters": {"lr": {"value": [1, 2]}}}, "parameters.lr.value", "parameters.lr.values"),
        (
            {"parameters": {"lr": {"distribution": "uniform", "min": 0, "high": 1}}},
            "parameters.lr.min",
            "parameters.lr.low",
        ),
        (
            {"parameters": {"lr": {"distrbution": "uniform", "low": 0, "high": 1}}},
            "parameters.lr.distrbution",
            "parameters.lr.distribution",
        ),
    ],
)
def test_a_misspelt_key_of_a_sweep_section_names_the_field_meant(
    changes: dict[str, Any], field: str, meant: str
) -> None:
    error = _sweep_error(**changes)
    assert error.field == field
    assert error.message.startswith(f"unknown field; did you mean {meant}?"), error.message


@pytest.mark.parametrize(
    ("key", "value", "home"),
    [
        ("command", ["python"], "trial.command"),
        ("gpus", 2, "trial.resources.gpus"),
        ("goal", "maximize", "metric.goal"),
        ("min_steps", 5, "early_stopping.min_steps"),
        ("values", [1, 2], "parameters.<name>.values"),
    ],
)
def test_a_field_of_another_sweep_section_names_where_it_goes(
    key: str, value: Any, home: str
) -> None:
    error = _sweep_error(**{key: value})
    assert error.field == key
    assert error.message.startswith("unknown field here"), error.message
    assert error.message.endswith(f"write it as {home}")


def test_a_job_arrays_body_gets_the_hints_too() -> None:
    body = {
        "name": "shard",
        "trial": {"command": ["x"]},
        "parameters": {"index": {"values": [0, 1]}},
        "method": "grid",
        "array": True,
        "paralel": 2,
    }
    with pytest.raises(SpecError) as caught:
        parse_sweep(body)
    assert caught.value.field == "paralel"
    assert caught.value.message.startswith("unknown field; did you mean parallel?")


def test_a_sweep_key_like_no_field_is_told_to_check_its_spelling_as_before() -> None:
    error = _sweep_error(colour="blue")
    assert error.field == "colour"
    assert error.message == "unknown field; check the spelling against the sweep spec reference"


@pytest.mark.parametrize(
    ("text", "field", "meant"),
    [
        ("nmae: a\ncommand: [x]\n", "nmae", "name"),
        ("name: a\ncommand: [x]\ntimeout: 2h\n", "timeout", "time_limit"),
        ("name: a\ncmd: [x]\n", "cmd", "command"),
        (
            "name: a\ncommand: [x]\nresources: {num_gpus: 2}\n",
            "resources.num_gpus",
            "resources.gpus",
        ),
    ],
)
def test_a_job_specs_misspelt_or_other_tools_key_names_the_field(
    text: str, field: str, meant: str
) -> None:
    """``nmae`` was told as ``name: this field is required``; ``timeout``, ``cmd`` and
    ``num_gpus`` (other schedulers' names) got no hint."""
    with pytest.raises(SpecError) as caught:
        loads_spec(text)
    assert caught.value.field == field
    message = caught.value.message
    assert message.startswith(f"unknown field; did you mean {meant}?"), message


def test_a_job_specs_other_tools_key_in_another_section_names_where_it_goes() -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec("name: a\ncommand: [x]\nnum_gpus: 2\n")
    assert caught.value.field == "num_gpus"
    assert caught.value.message.endswith("write it as resources.gpus")


@pytest.mark.parametrize(
    ("changes", "field", "fix"),
    [
        ({"metric": "loss"}, "metric", "write metric: {name: loss}"),
        ({"parameters": {"lr": [0.1, 0.2]}}, "parameters.lr", "write lr: {values: [0.1, 0.2]}"),
        ({"parameters": {"lr": 0.1}}, "parameters.lr", "write lr: {values: [0.1]}"),
        ({"parameters": {"lr": list(range(100))}}, "parameters.lr", "write lr: {values: [...]}"),
        ({"parameters": {}}, "parameters", "name at least one, e.g. lr: {values: [0.1, 0.01]}"),
        ({"trial": "job.yaml"}, "trial", "a path to a spec file is not read"),
        (
            {"metric": {"name": "loss"}, "early_stopping": True},
            "early_stopping",
            "write early_stopping: {rule: median}",
        ),
    ],
)
def test_a_sweep_section_of_the_wrong_shape_shows_what_to_write(
    changes: dict[str, Any], field: str, fix: str
) -> None:
    """``metric: loss`` or ``lr: [0.1, 0.2]`` was "must be a mapping of its fields, e.g.
    {field: value}", which named no field; ``parameters: {}`` was pydantic's "Dictionary
    should have at least 1 item after validation"."""
    error = _sweep_error(**changes)
    assert error.field == field
    assert fix in error.message, error.message


@pytest.mark.parametrize("key", ["arary", "arrray", "Array"])
def test_a_misspelt_job_array_range_names_array(key: str) -> None:
    """A job spec's ``array`` (a job array's range, which ``danlu submit`` reads) spelt
    nearly so was "unknown field; check the spelling" with no field named."""
    with pytest.raises(SpecError) as caught:
        loads_spec(f"name: a\ncommand: [x]\n{key}: 0-9\n")
    assert caught.value.field == key
    assert caught.value.message.startswith("unknown field; did you mean array?")


def test_array_itself_where_no_range_is_read_is_not_told_it_means_array() -> None:
    """``POST /jobs`` takes no ``array`` (a job array is a sweep): never "did you mean
    array?" of ``array``."""
    with pytest.raises(SpecError) as caught:
        loads_spec("name: a\ncommand: [x]\narray: 0-9\n")
    assert caught.value.message == (
        "unknown field; check the spelling against the job spec reference"
    )
