"""Gavel's co-location file read by danlu.estimate.colocation: a file not in its layout is a
:class:`DataError` naming the file and the entry, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from danlu.core.errors import DataError
from danlu.estimate.colocation import measured_pairs, share_medians

JOB_A = "('ResNet-18 (batch size 32)', 1)"
JOB_B = "('LM (batch size 20)', 1)"


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "throughputs.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("table", "entry"),
    [
        ({JOB_A: [1, 2]}, f"v100.{JOB_A}"),
        ({JOB_A: {"null": "fast", JOB_A: [1, 1]}}, f"v100.{JOB_A}"),
        ({JOB_A: {"null": 2.0, JOB_B: [1, 1]}, JOB_B: {JOB_A: [1, 1]}}, f"v100.{JOB_B}"),
        ({JOB_A: {"null": 2.0, JOB_A: 3}}, f"v100.{JOB_A}.{JOB_A}"),
        ({JOB_A: {"null": 2.0, JOB_A: [1]}}, f"v100.{JOB_A}.{JOB_A}"),
        ({JOB_A: {"null": 2.0, JOB_A: [1, "x"]}}, f"v100.{JOB_A}.{JOB_A}"),
    ],
)
def test_an_entry_out_of_layout_is_a_data_error(
    tmp_path: Path, table: dict[str, Any], entry: str
) -> None:
    path = _write(tmp_path, {"v100": table})
    with pytest.raises(DataError) as err:
        list(measured_pairs(path))
    assert str(path) in str(err.value) and entry in str(err.value)


def test_a_file_in_layout_still_reads(tmp_path: Path) -> None:
    table = {
        JOB_A: {"null": 10.0, JOB_B: [6.0, 1.5], JOB_A: [0.0, 0.0]},
        JOB_B: {"null": 2.0, JOB_A: [1.5, 6.0]},
    }
    pairs = list(measured_pairs(_write(tmp_path, {"v100": table})))
    assert [(p.job, p.other) for p in pairs] == [(JOB_A, JOB_B), (JOB_B, JOB_A)]
    assert pairs[0].job_share == pytest.approx(0.6) and pairs[0].other_share == 0.75
    medians = share_medians(_write(tmp_path, {"v100": table}))
    assert medians.by_family[("cnn-small", "lstm")] == pytest.approx(0.6)
