"""The rows :func:`danlu.estimate.throughput.fit_throughput` fits: checked when built, and
fitted the same whatever their order."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from danlu.core.errors import DataError, SpecError
from danlu.estimate.throughput import (
    StepMeasurement,
    fit_throughput,
    load_placements,
    load_scalability,
    mape,
    parse_placement,
)

# few rows, as a job that profiled a handful of configurations has
ROWS = [
    StepMeasurement(1, 2, 8, 1.2, 0.2),
    StepMeasurement(1, 1, 4, 0.5, 0.0),
    StepMeasurement(1, 1, 4, 0.5, 0.0),
    StepMeasurement(2, 4, 16, 3.0, 0.8),
    StepMeasurement(1, 1, 16, 1.7, 0.0),
]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((1, 1, 4, 1.0, 1.0), "sync_time"),  # no compute left: log(0) in the fit
        ((1, 2, 4, 1.0, 1.5), "sync_time"),
        ((1, 2, 4, 1.0, -0.1), "sync_time"),
        ((1, 1, 4, 0.0, 0.0), "step_time"),
        ((1, 1, 4, math.nan, 0.0), "step_time"),
        ((1, 1, 4, math.inf, 0.0), "step_time"),
        ((1, 1, 4, "1.0", 0.0), "step_time"),
        ((1, 2, 4, 1.0, math.nan), "sync_time"),
        ((2, 1, 4, 1.0, 0.1), "num_replicas"),  # two nodes cannot hold one replica
        ((0, 1, 4, 1.0, 0.1), "num_nodes"),
        ((1, 1, 0, 1.0, 0.1), "local_bsz"),
        ((1, 1, 2.5, 1.0, 0.1), "local_bsz"),
        ((1, True, 4, 1.0, 0.1), "num_replicas"),
    ],
)
def test_a_measurement_that_cannot_be_fitted_is_refused_by_field(
    args: tuple[Any, ...], field: str
) -> None:
    with pytest.raises(SpecError) as err:
        StepMeasurement(*args)
    assert err.value.field == field


def test_good_measurements_are_still_accepted() -> None:
    row = StepMeasurement(2, 4, 16, 0.5, 0.2)
    assert row.compute_time == pytest.approx(0.3)
    assert mape(fit_throughput([row]), [row]) < 1.0


def test_the_fit_does_not_depend_on_the_order_of_the_rows() -> None:
    reference = fit_throughput(ROWS)
    shuffled = list(ROWS)
    for seed in range(3):
        random.Random(seed).shuffle(shuffled)
        assert fit_throughput(shuffled).params == reference.params
    assert fit_throughput(ROWS[::-1]).params == reference.params
    # and so neither do its predictions for configurations never measured
    for config in [(16, 1, 8), (16, 2, 8), (64, 4, 32)]:
        assert fit_throughput(ROWS[::-1]).step_time(*config) == reference.step_time(*config)


def test_a_retrogression_term_is_pinned_without_rows_on_its_own_link() -> None:
    # more than 2 replicas only across nodes: nothing measures beta_r on one node
    fitted = fit_throughput(ROWS)
    assert fitted.params.beta_r == 0.0
    assert fitted.sync_time(1, 8) == fitted.sync_time(1, 2)
    # more than 2 replicas only on one node: nothing measures beta_n across nodes
    one_node = [
        StepMeasurement(1, 1, 8, 0.40, 0.0),
        StepMeasurement(1, 2, 8, 0.50, 0.10),
        StepMeasurement(1, 4, 8, 0.60, 0.20),
        StepMeasurement(2, 2, 8, 0.70, 0.30),
        StepMeasurement(1, 1, 16, 0.70, 0.0),
    ]
    fitted = fit_throughput(one_node)
    assert fitted.params.beta_n == 0.0
    assert fitted.params.beta_r > 0.0


def test_rows_may_come_from_an_iterator() -> None:
    # mape read a generator once per column: arrays of different lengths and a NaN MAPE
    model = fit_throughput(iter(ROWS))
    assert model == fit_throughput(ROWS)
    assert mape(model, (row for row in ROWS)) == pytest.approx(mape(model, ROWS))
    assert math.isfinite(mape(model, iter(ROWS)))
    with pytest.raises(DataError, match="no measurements"):
        fit_throughput(iter([]))
    with pytest.raises(DataError, match="no measurements"):
        mape(model, iter([]))


@pytest.mark.parametrize("loader", [load_placements, load_scalability])
@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe\x00\x81 not text\n",  # UnicodeDecodeError
        b"placement,local_bsz,step_time,sync_time\n1,32,0.1," + b"9" * 200_000 + b"\n",
    ],
    ids=["binary", "huge-field"],
)
def test_a_file_that_is_not_a_csv_of_measurements_is_a_data_error(
    tmp_path: Path, loader: Callable[[Path], object], content: bytes
) -> None:
    # a binary file raised UnicodeDecodeError, a huge field csv.Error
    path = tmp_path / "rows.csv"
    path.write_bytes(content)
    with pytest.raises(DataError, match=str(path)):
        loader(path)


@pytest.mark.parametrize("text", [None, 12, b"12"])
def test_a_placement_that_is_not_a_string_is_refused(text: Any) -> None:
    with pytest.raises(SpecError, match=r"^placement: "):
        parse_placement(text)
