"""Sweep specs: a job array's indices are those the CLI takes (unique, within
0..MAX_ARRAY_INDEX) and it has no metric; a parameter value no trial's environment can hold
is refused at submission, naming the parameter, not when the search reaches it."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.job_array import MAX_ARRAY_INDEX
from danlu.core.spec import MAX_EXEC_STRING, MAX_EXEC_TOTAL, parse_spec
from danlu.core.sweep import parse_sweep

ARRAY: dict[str, Any] = {
    "name": "shard",
    "trial": {"command": ["python", "shard.py"]},
    "parameters": {"index": {"values": [0, 1]}},
    "method": "grid",
    "array": True,
}


def _array(**extra: Any) -> dict[str, Any]:
    return {**ARRAY, **extra}


def test_an_array_takes_the_indices_the_cli_takes() -> None:
    spec = parse_sweep(_array(parameters={"index": {"values": [MAX_ARRAY_INDEX, 0, 7]}}))
    assert spec.parameters["index"].values == [MAX_ARRAY_INDEX, 0, 7]


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ([-3, 1], "-3 is below 0"),
        ([0, MAX_ARRAY_INDEX + 1], f"is too large: an index lies within 0..{MAX_ARRAY_INDEX:,}"),
        ([5, 1, 5], "5 is listed twice"),
    ],
    ids=["negative", "too-large", "repeated"],
)
def test_an_array_refuses_indices_the_cli_refuses(values: list[int], needle: str) -> None:
    with pytest.raises(SpecError, match=needle) as caught:
        parse_sweep(_array(parameters={"index": {"values": values}}))
    assert caught.value.field == "parameters.index.values"


@pytest.mark.parametrize(
    "extra",
    [
        {"metric": {"name": "loss"}},
        {"metric": {"name": "loss"}, "early_stopping": {"rule": "median"}},
    ],
    ids=["metric", "early-stopping"],
)
def test_an_array_has_no_metric(extra: dict[str, Any]) -> None:
    with pytest.raises(SpecError, match="a job array has no metric") as caught:
        parse_sweep(_array(**extra))
    assert caught.value.field == "metric"


SWEEP: dict[str, Any] = {
    "name": "tok",
    "trial": {"command": ["python", "train.py"]},
    "method": "grid",
}
PREFIX = len('DANLU_HPARAMS={"tok": "')
SUFFIX = len('"}')


def _longest(n: int) -> dict[str, Any]:
    """A sweep whose parameter ``tok`` has a short value first and one of ``n`` characters."""
    return {**SWEEP, "parameters": {"tok": {"values": ["short", "x" * n]}}}


def test_a_value_too_long_for_an_environment_is_refused_naming_the_parameter() -> None:
    fits = MAX_EXEC_STRING - 1 - PREFIX - SUFFIX  # the variable and its NUL: 128 KiB
    spec = parse_sweep(_longest(fits))
    # the same limits as a trial's own check: the longest trial is accepted there too
    env = {"DANLU_HPARAMS": '{"tok": "' + "x" * fits + '"}'}
    parse_spec({**spec.trial, "name": "tok-1", "env": env})
    with pytest.raises(SpecError, match="DANLU_HPARAMS with the longest values is 131,072 bytes"):
        parse_sweep(_longest(fits + 1))
    with pytest.raises(SpecError) as caught:
        parse_sweep(_longest(140_000))
    assert caught.value.field == "parameters.tok.values"


def test_values_within_one_variable_but_too_long_with_the_trial_env_are_refused() -> None:
    """Each parameter fits, and so does DANLU_HPARAMS, but not with the trial's own env."""
    big = "y" * (MAX_EXEC_STRING - 100)
    env = {f"BIG{i}": big for i in range(MAX_EXEC_TOTAL // MAX_EXEC_STRING)}
    trial = {"command": ["python", "train.py"], "env": env}
    parse_sweep({**SWEEP, "trial": trial, "parameters": {"tok": {"values": ["a", "b"]}}})
    body = {
        **SWEEP,
        "trial": trial,
        "parameters": {
            "small": {"values": [1, 2]},
            "tok": {"values": ["a", "z" * (MAX_EXEC_STRING // 2)]},
        },
    }
    with pytest.raises(SpecError, match="with the longest values, the command and env") as caught:
        parse_sweep(body)
    assert caught.value.field == "parameters.tok.values"


def test_the_longest_value_of_every_parameter_counts_together() -> None:
    """Two values that each fit alone make one DANLU_HPARAMS too long (random search draws
    any combination; a grid runs every one)."""
    half = MAX_EXEC_STRING // 2
    body = {
        **SWEEP,
        "method": "random",
        "trials": 2,
        "parameters": {
            "a": {"values": ["a" * half, "b"]},
            "b": {"values": ["c", "d" * (half + 10)]},
            "lr": {"distribution": "uniform", "low": 0.0, "high": 1.0},
        },
    }
    with pytest.raises(SpecError) as caught:
        parse_sweep(body)
    assert caught.value.field == "parameters.b.values"
    parse_sweep({**body, "parameters": {**body["parameters"], "a": {"values": ["a", "b"]}}})
