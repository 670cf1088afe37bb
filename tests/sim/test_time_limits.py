"""Time limits in the simulator: a plain workload's ``time_limit`` column cancels a job once
it has held GPUs that long over all its runs (as the control plane does), and is what the
scheduler is told of the job's duration."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError, DataError
from danlu.core.state import JobState
from danlu.sched.registry import make_policy
from danlu.sched.view import JobRequest
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.workload import ProfiledWork, Workload, WorkloadJob, load_workload

HEADER = "name,submit_time,gpus,duration,priority,gpu_memory,family,model,project,time_limit"


def run(tmp_path: Path, rows: list[str], policy: str = "fifo", **options: object) -> SimResult:
    path = tmp_path / "w.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return Simulator(
        Cluster.homogeneous(1, 1),
        make_policy(policy, **options),
        load_workload(path),
        SimConfig(interval=60.0, restart_cost=30.0, record_events=True),
    ).run()


def test_a_job_is_cancelled_at_its_limit_and_the_next_one_starts(tmp_path: Path) -> None:
    # long starts at 60 and would run 500 s; its limit of 200 s ends it at 260; short then
    # starts at the next tick, 300, and ends within its limit
    result = run(tmp_path, ["long,0,1,500,,,,,,200", "short,0,1,100,,,,,,150"])
    records = {r.id: r for r in result.jobs}
    assert (records["long"].start_time, records["long"].end_time) == (60.0, 260.0)
    assert records["long"].timed_out and not records["short"].timed_out
    assert (records["short"].start_time, records["short"].end_time) == (300.0, 400.0)
    summary = result.summary()
    assert summary["timed_out"] == 1.0 and summary["jobs"] == 2.0
    # long's 200 GPU-seconds were held but its work is lost: only short's 100 s are useful
    assert summary["gpu_utilization"] == pytest.approx(100 / 400)
    ends = [(e.job_id, e.new, e.reason) for e in result.events if e.new.terminal]
    assert ends == [
        ("long", JobState.CANCELLED, "time limit reached: ran 3m20s of 3m20s"),
        ("short", JobState.SUCCEEDED, "finished"),
    ]
    per_job = {j["id"]: j["timed_out"] for j in result.to_json()["per_job"]}
    assert per_job == {"long": True, "short": False}


def test_the_limit_counts_every_run_and_the_restarts(tmp_path: Path) -> None:
    # low starts at 60; high (priority 1) arrives at 100 and preempts it at 120 (low ran
    # 60 s); high ends at 170; low resumes at 180 with 300 - 60 = 240 s of its limit left,
    # 30 of them paying the restart: it is cancelled at 420 with 210 s of 400 done
    rows = ["low,0,1,400,0,,,,,300", "high,100,1,50,1,,,,,"]
    result = run(tmp_path, rows, "priority")
    records = {r.id: r for r in result.jobs}
    assert records["low"].end_time == 420.0 and records["low"].timed_out
    assert records["low"].preemptions == 1
    assert records["low"].gpu_seconds == pytest.approx(300.0)
    assert not records["high"].timed_out


def test_the_scheduler_is_told_the_limit_not_the_duration(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text(f"{HEADER}\nguessed,0,1,100,,,,,,3600\nknown,0,1,100,,,,,,\n")
    jobs = {job.request.id: job for job in load_workload(path).jobs}
    assert jobs["guessed"].request.expected_duration == 3600.0
    assert jobs["guessed"].time_limit == 3600.0
    assert jobs["known"].request.expected_duration == 100.0 and jobs["known"].time_limit is None
    # sjf ranks by what it is told: the job that says 3,600 s goes after the one of 500 s
    result = run(tmp_path, ["guessed,0,1,100,,,,,,3600", "honest,0,1,500,,,,,,600"], "sjf")
    starts = {r.id: r.start_time for r in result.jobs}
    assert starts["honest"] == 60.0 and starts["guessed"] == 600.0


def test_bad_limits_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text(f"{HEADER}\nzero,0,1,100,,,,,,0\n")
    with pytest.raises(DataError, match="time_limit' must be above 0"):
        load_workload(path)
    path.write_text(f"{HEADER}\nneg,0,1,100,,,,,,-5\n")
    with pytest.raises(DataError, match="time_limit"):
        load_workload(path)
    profiled = WorkloadJob(
        JobRequest(id="p", submit_time=0.0), ProfiledWork("cifar10", 128), time_limit=60.0
    )
    with pytest.raises(ConfigError, match="time limits apply to rigid jobs"):
        Simulator(
            Cluster.homogeneous(1, 1), make_policy("fifo"), Workload("w", "danlu", (profiled,))
        ).run()
