"""The GPU time of a job the engine rejected after it ran lies in the summary's window: the
window reached only the finished and unfinished jobs, so a run of such a job before the
first of their submissions (or after the last end) fell outside it, and the allocation
ratio and the makespan left it out. Its GPU time counts as allocated, not as useful work."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.view import ClusterView, Plan, Preempt, Start
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.workload import load_workload

GPU_0 = Allocation.whole_gpus([(0, 0)])


class RunsXOnce:
    """Starts ``x`` at its first round, preempts it at the next, then starts any other job
    on GPU 0 when the cluster is idle, never ``x`` again: the engine rejects ``x``."""

    name = "x-once"

    def __init__(self) -> None:
        self.rounds = 0

    def schedule(self, view: ClusterView) -> Plan:
        self.rounds += 1
        if self.rounds == 1:
            return Plan(starts=(Start("x", GPU_0),))
        if self.rounds == 2:
            return Plan(preempts=(Preempt("x", "test"),))
        others = [job.id for job in view.pending if job.id != "x"]
        starts = (Start(others[0], GPU_0),) if others and not view.running else ()
        return Plan(starts=starts, recheck_at=math.inf)


def _run(tmp_path: Path, rows: str) -> SimResult:
    path = tmp_path / "w.csv"
    path.write_text("name,submit_time,gpus,duration\n" + rows)
    return Simulator(Cluster.homogeneous(1, 4), RunsXOnce(), load_workload(path)).run()


def test_a_run_before_the_first_kept_submission_is_in_the_window(tmp_path: Path) -> None:
    # x holds GPU 0 from 60 s to 120 s; y is submitted at 1000 s and runs 1020..1120 s
    result = _run(tmp_path, "x,0,1,100000\ny,1000,1,100\n")
    assert [job for job, _ in result.rejected] == ["x"]
    (y,) = result.jobs
    assert (y.start_time, y.end_time) == (1020.0, 1120.0)
    summary = result.summary()
    assert summary["makespan"] == 1120.0  # from x's submission (it was 120: y's alone)
    assert summary["gpu_allocation_ratio"] == pytest.approx((60 + 100) / (4 * 1120))
    assert summary["gpu_utilization"] == pytest.approx(100 / (4 * 1120))  # x's: not useful


def test_a_lone_rejected_run_has_a_window(tmp_path: Path) -> None:
    result = _run(tmp_path, "x,0,1,100000\n")
    summary = result.summary()
    assert summary["jobs"] == 0 and summary["makespan"] == 120.0
    assert summary["gpu_allocation_ratio"] == pytest.approx(60 / (4 * 120))
    assert summary["gpu_utilization"] == 0.0
