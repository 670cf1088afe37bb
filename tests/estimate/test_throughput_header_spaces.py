"""The estimate's measurement CSVs read their header as the simulator's loaders do: spaces
around a column's name (``step_time, sync_time``, as written after a comma) are stripped, so
`` step_time`` is the column ``step_time``, not a missing one; a column still missing is
named, and one given twice (once spaced) is refused rather than one value silently kept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from danlu.core.errors import DataError
from danlu.estimate.throughput import StepMeasurement, load_placements, load_scalability

LOADERS: dict[str, tuple[Callable[[Path], list[StepMeasurement]], list[str], str]] = {
    "placements.csv": (
        load_placements,
        ["placement", "local_bsz", "step_time", "sync_time"],
        "12,8,0.5,0.1",
    ),
    "scalability.csv": (
        load_scalability,
        ["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"],
        "2,3,8,0.5,0.1",
    ),
}
GOOD = StepMeasurement(2, 3, 8, 0.5, 0.1)


def _write(tmp_path: Path, name: str, header: str, row: str) -> Path:
    path = tmp_path / name
    path.write_text(f"{header}\n{row}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(LOADERS))
@pytest.mark.parametrize("join", [", ", " ,", " , ", ",\t"])
def test_spaces_around_column_names_are_stripped(tmp_path: Path, name: str, join: str) -> None:
    load, columns, row = LOADERS[name]
    path = _write(tmp_path, name, f" {join.join(columns)} ", row)
    assert load(path) == [GOOD]


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_column_still_missing_is_named(tmp_path: Path, name: str) -> None:
    load, columns, row = LOADERS[name]
    header = ", ".join(c if c != "sync_time" else "sync" for c in columns)
    path = _write(tmp_path, name, header, row)
    with pytest.raises(DataError) as err:
        load(path)
    message = str(err.value)
    assert message.startswith(f"{path}:1: missing column(s) sync_time;")
    assert f"expected header {','.join(columns)}" in message


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_column_given_twice_once_spaced_is_refused(tmp_path: Path, name: str) -> None:
    load, columns, row = LOADERS[name]
    path = _write(tmp_path, name, ",".join(columns) + ", step_time", row + ",9.0")
    with pytest.raises(DataError) as err:
        load(path)
    assert str(err.value).startswith(f"{path}:1: column(s) step_time appear more than once")
