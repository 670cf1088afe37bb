"""The estimate's measurement loaders read numbers as the simulator's do: ``1_000`` and
other scripts' digits (Arabic-Indic ``\u0661``), which Python's ``float`` takes, are a
:class:`DataError` naming ``file:line`` and the column; and a UTF-8 byte-order mark at the
start of a file (as Windows editors write) is skipped, not read into the first column's
name or refused as JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from danlu.core.errors import DataError
from danlu.estimate.colocation import measured_pairs
from danlu.estimate.throughput import StepMeasurement, load_placements, load_scalability

BOM = "\ufeff"
HEADERS = {
    "placements.csv": "placement,local_bsz,step_time,sync_time",
    "scalability.csv": "num_nodes,num_replicas,local_bsz,step_time,sync_time",
}
ROWS = {"placements.csv": "12,8,0.5,0.1", "scalability.csv": "2,3,8,0.5,0.1"}
LOADERS: dict[str, Callable[[Path], list[StepMeasurement]]] = {
    "placements.csv": load_placements,
    "scalability.csv": load_scalability,
}
GOOD = StepMeasurement(2, 3, 8, 0.5, 0.1)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_a_byte_order_mark_is_skipped(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path, name, f"{BOM}{HEADERS[name]}\n{ROWS[name]}\n")
    assert LOADERS[name](path) == [GOOD]


@pytest.mark.parametrize(
    ("name", "row", "column", "cell"),
    [
        ("placements.csv", "12,1_6,0.5,0.1", "local_bsz", "1_6"),
        ("placements.csv", "12,8,0.5,0.000_1", "sync_time", "0.000_1"),
        ("placements.csv", "12,\u0668,0.5,0.1", "local_bsz", "\u0668"),
        ("placements.csv", "12,8,\u0660.5,0.1", "step_time", "\u0660.5"),
        ("scalability.csv", "\u0662,3,8,0.5,0.1", "num_nodes", "\u0662"),
        ("scalability.csv", "2,3_0,8,0.5,0.1", "num_replicas", "3_0"),
        ("scalability.csv", "2,3,8,0.5,\uff10.1", "sync_time", "\uff10.1"),
    ],
    ids=[
        "bsz-underscore",
        "sync-underscore",
        "bsz-arabic-indic",
        "step-arabic-indic",
        "nodes-arabic-indic",
        "replicas-underscore",
        "sync-fullwidth",
    ],
)
def test_a_number_not_in_plain_ascii_is_refused_naming_file_line_and_column(
    tmp_path: Path, name: str, row: str, column: str, cell: str
) -> None:
    path = _write(tmp_path, name, f"{HEADERS[name]}\n{ROWS[name]}\n{row}\n")
    with pytest.raises(DataError) as err:
        LOADERS[name](path)
    message = str(err.value)
    assert message.startswith(f"{path}:3: column {column!r} is {cell!r}")
    assert "ASCII digits 0-9 without '_'" in message


def test_a_byte_order_mark_before_gavels_json_is_skipped(tmp_path: Path) -> None:
    job = "('ResNet-18 (batch size 32)', 1)"
    data = {"v100": {job: {"null": 2.0, job: [1.0, 1.0]}}}
    path = tmp_path / "throughputs.json"
    path.write_bytes((BOM + json.dumps(data)).encode("utf-8"))
    pairs = list(measured_pairs(path))
    assert [(p.job, p.other, p.job_share, p.other_share) for p in pairs] == [(job, job, 0.5, 0.5)]
