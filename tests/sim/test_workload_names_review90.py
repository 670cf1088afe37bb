"""The workload loader: a job name used twice was reported by the jobs'
places among the jobs kept ("jobs 1 and 2 of the file"), which are not the file's rows
when an openb list's CPU-only or never-scheduled pods come before them."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import DataError
from danlu.sim.workload import load_workload

OPENB = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\r\n"
)


def test_a_repeated_openb_pod_name_names_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(
        OPENB
        + "cpu1,1000,100,0,0,,LS,Running,0,100,0\r\n"
        + "p1,1000,100,1,1000,,LS,Running,0,100,0\r\n"
        + "late,1000,100,1,1000,,BE,Pending,1,100,\r\n"
        + "p1,1000,100,1,1000,,LS,Running,5,100,5\r\n",
        newline="",
    )
    with pytest.raises(DataError) as caught:
        load_workload(path)
    assert f"{path}:5: job name 'p1' is used twice (lines 3 and 5)" in str(caught.value)


def test_a_repeated_pollux_job_name_names_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text(
        "name,time,application,num_replicas,batch_size\n\n"
        "a,0,cifar10,1,128\nb,1,cifar10,1,128\n\na,2,cifar10,1,128\n"
    )
    with pytest.raises(DataError, match=r"w\.csv:6: job name 'a' is used twice \(lines 3 and 6\)"):
        load_workload(path)


def test_distinct_names_still_load(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,submit_time,gpus,duration\na,0,1,10\nb,0,1,10\n")
    assert [job.request.id for job in load_workload(path).jobs] == ["a", "b"]
