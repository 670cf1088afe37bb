"""The simulator's summary counters: with ``max_time`` the counters of what
happened to jobs (restarts, resizes, runs and training lost to failures, slowdown by
sharing) counted the finished jobs alone, while ``preemptions`` and ``node_failures``
counted every event (13 node failures showed 2 lost runs; 26 runs were lost)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, Plan, Preempt, Start
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.failures import Failures
from danlu.sim.workload import load_workload

COUNTERS = ("resizes", "restarts", "interference_seconds", "lost_runs", "lost_training_seconds")


def _workload(tmp_path: Path, rows: str) -> Path:
    path = tmp_path / "w.csv"
    path.write_text("name,submit_time,gpus,duration\n" + rows)
    return path


def test_failure_counters_count_the_jobs_the_clock_stopped(tmp_path: Path) -> None:
    rows = "".join(f"j{i},{i * 10},2,{20000 + i * 100}\n" for i in range(6))
    workload = load_workload(_workload(tmp_path, rows))
    config = SimConfig(max_time=30000.0, failures=Failures(mtbf=4000.0, repair=600.0, seed=1))
    result = Simulator(Cluster.homogeneous(2, 4), make_policy("fifo"), workload, config).run()
    assert result.unfinished, "the clock must stop with jobs unfinished for this test"
    records = result.all_records()
    lost_runs = sum(r.failures for r in records)
    unfinished_lost = sum(r.failures for r in result.unfinished_records)
    assert unfinished_lost > 0, "some unfinished job must have lost a run"
    summary = result.summary()
    assert summary["lost_runs"] == lost_runs
    assert summary["lost_training_seconds"] == pytest.approx(sum(r.lost_seconds for r in records))
    assert summary["restarts"] == sum(r.restarts for r in records)
    assert summary["max_job_restarts"] == max(r.restarts for r in records)
    # the finished jobs' lost runs alone were the figure
    assert summary["lost_runs"] > sum(r.failures for r in result.jobs)


class PreemptsOnce:
    """Starts ``a`` at its first round, preempts it at the second and starts it again at
    the third; the clock stops before it ends."""

    name = "preempts-once"

    def __init__(self) -> None:
        self.rounds = 0

    def schedule(self, view: ClusterView) -> Plan:
        self.rounds += 1
        if self.rounds in (1, 3):
            return Plan(starts=(Start("a", Allocation.whole_gpus([(0, 0)])),))
        if self.rounds == 2:
            return Plan(preempts=(Preempt("a", "test"),))
        return Plan(recheck_at=math.inf)


def test_restarts_of_a_running_job_agree_with_preemptions(tmp_path: Path) -> None:
    workload = load_workload(_workload(tmp_path, "a,0,1,100000\n"))
    config = SimConfig(max_time=1000.0)
    result = Simulator(Cluster.homogeneous(1, 4), PreemptsOnce(), workload, config).run()
    assert result.unfinished == ["a"] and result.jobs == []
    summary = result.summary()
    assert summary["preemptions"] == 1
    # a was preempted and resumed: one restart, as its per_job entry says (it read 0)
    assert summary["restarts"] == 1 == summary["max_job_restarts"]
    per_job = result.to_json()["per_job"]
    assert [job["restarts"] for job in per_job] == [1]
    assert result.to_json()["restarts"] == sum(job["restarts"] for job in per_job)


def test_counters_of_a_run_to_the_end_are_unchanged(tmp_path: Path) -> None:
    rows = "".join(f"j{i},{i * 10},2,{2000 + i * 100}\n" for i in range(6))
    workload = load_workload(_workload(tmp_path, rows))
    config = SimConfig(failures=Failures(mtbf=4000.0, repair=600.0, seed=1))
    result = Simulator(Cluster.homogeneous(2, 4), make_policy("fifo"), workload, config).run()
    assert not result.unfinished and not result.rejected
    summary = result.summary()
    for key, field in zip(
        COUNTERS,
        ("resizes", "restarts", "interference_seconds", "failures", "lost_seconds"),
        strict=True,
    ):
        assert summary[key] == pytest.approx(sum(getattr(r, field) for r in result.jobs))
