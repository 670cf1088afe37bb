"""Job arrays: Slurm's index ranges, and the sweep an array runs as; sweeps without a
metric."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.job_array import ArrayRange, array_sweep, parse_array
from danlu.core.sweep import parse_sweep


@pytest.mark.parametrize(
    ("text", "indices", "parallel"),
    [
        ("0-4", (0, 1, 2, 3, 4), 5),
        ("1-9:4", (1, 5, 9), 3),
        ("1,3,8", (1, 3, 8), 3),
        ("0-2,10-11", (0, 1, 2, 10, 11), 5),
        ("0-99%8", tuple(range(100)), 8),
        (" 3,1,8 %10", (1, 3, 8), 3),  # in index order; never more at once than tasks
        ("7", (7,), 1),
    ],
)
def test_ranges_read_as_slurm_writes_them(
    text: str, indices: tuple[int, ...], parallel: int
) -> None:
    assert parse_array(text) == ArrayRange(indices, parallel)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "not an index range"),
        ("a-b", "not an index range"),
        ("-1", "has an index below 0"),
        ("5-1", "runs backwards"),
        ("0-9:0", "step of 0"),
        ("0-9%0", "%0 is not a number"),
        ("0-9%x", "%x is not a number"),
        ("0-1000", "at most 1,000 tasks"),
        ("0-500,600-1200", "at most 1,000 tasks"),
        ("99999999", "an index is at most"),
        # isdigit() took the superscript and int() raised a bare ValueError
        ("0-9%\u00b2", "is not a number"),
        ("0-9%\u0663", "is not a number"),  # ARABIC-INDIC DIGIT THREE: ASCII digits only
        ("\u00b2-5", "not an index range"),
        ("0-\u0663", "not an index range"),
    ],
)
def test_bad_ranges_name_the_field_and_the_fix(text: str, needle: str) -> None:
    with pytest.raises(SpecError, match=needle) as caught:
        parse_array(text, "--array")
    assert caught.value.field == "--array"


def test_an_array_is_a_grid_sweep_over_index_without_a_metric() -> None:
    job = {"name": "eval", "command": ["python", "eval.py"], "array": "0-3", "priority": 2}
    spec = parse_sweep(array_sweep(job, parse_array("0-3%2")))
    assert (spec.name, spec.method, spec.parallel, spec.total, spec.array) == (
        "eval",
        "grid",
        2,
        4,
        True,
    )
    assert spec.metric is None and spec.trial == {"command": ["python", "eval.py"], "priority": 2}
    assert spec.parameters["index"].values == [0, 1, 2, 3]


def test_sweeps_without_a_metric_and_arrays_are_checked() -> None:
    base = {
        "name": "s",
        "trial": {"command": ["true"]},
        "parameters": {"index": {"values": [0, 1]}},
        "method": "grid",
    }
    assert parse_sweep(base).metric is None
    with pytest.raises(SpecError, match="tpe search draws where trials did best"):
        parse_sweep({**base, "method": "tpe", "trials": 3})
    with pytest.raises(SpecError, match="early stopping compares"):
        parse_sweep({**base, "early_stopping": {"rule": "median"}})
    for bad in (
        {"parameters": {"index": {"values": [0, 1.5]}}},
        {"parameters": {"index": {"values": [0]}, "lr": {"values": [1]}}},
        {"method": "random", "trials": 2},
    ):
        with pytest.raises(SpecError, match="a job array has one parameter, index"):
            parse_sweep({**base, "array": True, **bad})
    with pytest.raises(SpecError, match="DANLU_ARRAY_INDEX"):
        parse_sweep({**base, "trial": {"command": ["true"], "env": {"DANLU_ARRAY_INDEX": "1"}}})
