"""A plain workload's durations under 1 s are kept as given (they were read as 1 s without a
word; the docs call ``duration`` the job's true running time): the job runs that long and
the scheduler is told that estimate."""

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
