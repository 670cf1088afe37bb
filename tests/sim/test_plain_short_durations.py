"""A workload's durations under 1 s, plain, Philly or openb, are kept as given (they were
read as 1 s without a word; the docs call ``duration`` the job's true running time): the job
runs that long and the scheduler is told that estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.cluster import Cluster
from danlu.sched.registry import make_policy
from danlu.sim.engine import Simulator
from danlu.sim.workload import RigidWork, load_workload

ROWS = "name,submit_time,gpus,duration\na,0,1,0\nb,0,1,0.4\nc,0.2,2,0.75\nd,1,1,3\n"


def _workload(tmp_path: Path) -> Path:
    path = tmp_path / "w.csv"
    path.write_text(ROWS)
    return path


def test_durations_under_a_second_are_read_as_given(tmp_path: Path) -> None:
    jobs = {job.request.id: job for job in load_workload(_workload(tmp_path)).jobs}
    durations = {}
    for name, job in jobs.items():
        assert isinstance(job.work, RigidWork)
        durations[name] = job.work.duration
        assert job.request.expected_duration == job.work.duration
    assert durations == {"a": 0.0, "b": 0.4, "c": 0.75, "d": 3.0}


@pytest.mark.parametrize("policy", ["fifo", "sjf", "value-density", "danlu"])
def test_they_run_for_as_long(tmp_path: Path, policy: str) -> None:
    workload = load_workload(_workload(tmp_path))
    result = Simulator(Cluster.homogeneous(1, 4), make_policy(policy), workload).run()
    ran = {r.id: r.end_time - r.start_time for r in result.jobs if r.end_time and r.start_time}
    assert len(result.jobs) == 4
    assert ran["b"] == pytest.approx(0.4) and ran["c"] == pytest.approx(0.75)
    (a,) = [r for r in result.jobs if r.id == "a"]
    assert a.end_time == a.start_time  # a job of 0 s ends as it starts


PHILLY = (
    "timestamp,duration,num_gpus,gpu_time,cluster\n"
    "2017-10-09 07:01:55,0.3,1,0.3,vc\n"
    "2017-10-09 07:01:56,0,2,0,vc\n"
    "2017-10-09 07:01:57,5,1,5,vc\n"
)
OPENB = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    "p0,1000,1024,1,1000,,LS,Succeeded,0,0.3,0\n"
    "p1,1000,1024,1,500,,LS,Succeeded,1,7,1\n"
    "p2,1000,1024,1,1000,,LS,Succeeded,2,2,2\n"
    "p3,1000,1024,2,1000,,LS,Succeeded,3,9.5,4\n"
)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (PHILLY, {"philly-0": 0.3, "philly-1": 0.0, "philly-2": 5.0}),
        (OPENB, {"p0": 0.3, "p1": 6.0, "p2": 0.0, "p3": 5.5}),
    ],
    ids=["philly", "openb"],
)
def test_trace_durations_under_a_second_are_kept_too(
    tmp_path: Path, rows: str, expected: dict[str, float]
) -> None:
    """Philly's ``duration`` and an openb pod's scheduled-to-deleted time were floored to
    1 s: a pod of 0.3 s ran (and was estimated) 1 s, over three times as long, and one
    deleted as it was scheduled 1 s instead of 0; the docs say a pod runs from its
    ``scheduled_time`` to its ``deletion_time``."""
    path = tmp_path / "trace.csv"
    path.write_text(rows)
    workload = load_workload(path)
    durations = {}
    for job in workload.jobs:
        assert isinstance(job.work, RigidWork)
        assert job.request.expected_duration == job.work.duration
        durations[job.request.id] = job.work.duration
    assert durations == pytest.approx(expected)
    result = Simulator(Cluster.homogeneous(1, 4), make_policy("fifo"), workload).run()
    ran = {r.id: r.end_time - r.start_time for r in result.jobs}
    assert ran == pytest.approx(expected)
