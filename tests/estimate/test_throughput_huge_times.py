"""Step times beyond any job's length are refused naming the field (file and line for a
measurement file): near a float's largest the fit stopped with scipy's bare
``ValueError: Residuals are not finite in the initial point``."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import DataError, SpecError
from danlu.core.spec import MAX_DURATION
from danlu.estimate.throughput import (
    StepMeasurement,
    fit_throughput,
    load_placements,
    load_scalability,
)


def test_a_step_time_beyond_a_jobs_length_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="step_time") as caught:
        StepMeasurement(1, 1, 32, 1e300, 0.0)
    assert "at most" in str(caught.value) and "seconds" in str(caught.value)


def test_the_longest_step_a_job_may_run_still_fits() -> None:
    rows = [StepMeasurement(1, 1, 32, MAX_DURATION, 0.0), StepMeasurement(1, 1, 64, 0.5, 0.0)]
    model = fit_throughput(rows)
    assert model.step_time(32, 1, 1) > 0


def test_a_placements_file_with_a_huge_step_time_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "placements.csv"
    path.write_text("placement,local_bsz,step_time,sync_time\n1,32,1e300,0\n1,64,1.7e308,0\n")
    with pytest.raises(DataError, match=r"placements.csv:2: column 'step_time' is 1e\+300"):
        load_placements(path)


def test_a_scalability_file_with_a_huge_step_time_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "scalability.csv"
    path.write_text(
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n1,1,32,0.1,0\n1,2,32,4e9,1\n"
    )
    with pytest.raises(DataError, match=r"scalability.csv:3: column 'step_time' is 4e\+09"):
        load_scalability(path)
