"""A workload column of a whole count (GPUs, replicas, batch size) refuses a negative or
infinite value with the rule it must meet, not "must be >= 0" (after which 0 was refused
too, as below the least count)."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import DataError
from danlu.sim.workload import load_workload


@pytest.mark.parametrize(
    ("header", "row", "message"),
    [
        (
            "name,submit_time,gpus,duration",
            "a,0,-1,10",
            "column 'gpus' must be a whole number >= 1, got '-1'",
        ),
        (
            "name,submit_time,gpus,duration",
            "a,0,inf,10",
            "column 'gpus' must be a whole number >= 1, got 'inf'",
        ),
        (
            "name,time,application,num_replicas,batch_size",
            "a,0,bert,1,-32",
            "column 'batch_size' must be a whole number >= 1, got '-32'",
        ),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time",
            "p,-4000,0,1,500,0,10,",
            "column 'cpu_milli' must be a whole number >= 0, got '-4000'",
        ),
    ],
)
def test_a_negative_count_names_its_rule(
    tmp_path: Path, header: str, row: str, message: str
) -> None:
    path = tmp_path / "w.csv"
    path.write_text(f"{header}\n{row}\n")
    with pytest.raises(DataError) as info:
        load_workload(path)
    assert str(info.value) == f"{path}:2: {message}"
