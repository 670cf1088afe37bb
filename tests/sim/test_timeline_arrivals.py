"""The timeline (``danlu sim run --plot``'s pending line, the JSON's ``timeline``) counts a
job pending from its submission. Jobs submitted between two scheduling instants wait for
the next one, and were counted only from there: two jobs submitted at t = 0 on an idle
cluster showed 0 pending (and 0 running) until the first tick at 60 s. The points added
for them leave the GPUs, the fragmentation and every summary figure as they were."""

from __future__ import annotations

from pathlib import Path

from danlu.core.cluster import Cluster
from danlu.sched.registry import make_policy
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.workload import load_workload


def _run(tmp_path: Path, rows: list[str], config: SimConfig | None = None) -> SimResult:
    path = tmp_path / "w.csv"
    path.write_text("\n".join(["name,submit_time,gpus,duration", *rows]) + "\n")
    cluster = Cluster.homogeneous(1, 4)
    return Simulator(cluster, make_policy("fifo"), load_workload(path), config or SimConfig()).run()


def _points(result: SimResult) -> dict[float, tuple[int, int, float]]:
    """Each point of the timeline: (pending, running, GPUs allocated) by time."""
    line = result.timeline
    return {
        t: (p, r, a)
        for t, p, r, a in zip(
            line.times, line.pending, line.running, line.allocated_gpus, strict=True
        )
    }


def test_jobs_submitted_at_zero_are_pending_until_the_first_tick(tmp_path: Path) -> None:
    result = _run(tmp_path, ["a,0,1,100", "b,0,2,100"])
    points = _points(result)
    assert points[0.0] == (2, 0, 0.0)  # both wait for the tick at 60 s
    assert points[60.0] == (0, 2, 3.0)
    assert [r.queueing_delay for r in result.jobs] == [60.0, 60.0]


def test_a_job_submitted_between_ticks_is_pending_from_its_submission(tmp_path: Path) -> None:
    # a runs 60..160 on 1 GPU; b arrives at 90 and runs 120..170; c arrives at 130 and,
    # wanting all 4 GPUs, starts at 180
    result = _run(tmp_path, ["a,0,1,100", "b,90,1,50", "c,130,4,10"])
    points = _points(result)
    assert points[90.0] == (1, 1, 1.0)  # b waits from 90 for the tick at 120
    assert points[130.0] == (1, 2, 2.0)  # a and b run, c waits from 130
    assert points[160.0] == (1, 1, 1.0)  # a ended at its exact time, c still waits
    assert points[180.0] == (0, 1, 4.0)
    times = result.timeline.times
    assert times == sorted(times) and len(set(times)) == len(times)


def test_every_point_counts_the_jobs_waiting_and_running_then(tmp_path: Path) -> None:
    """At every point of the timeline (the state after all that happened at its time),
    ``pending`` is the jobs submitted and not yet started, ``running`` those started and
    not yet ended (fifo moves no job once started)."""
    rows = [f"j{i},{17 * i},{1 + i % 3},{200 + 37 * i}" for i in range(12)]
    result = _run(tmp_path, rows)
    jobs = result.jobs
    assert len(jobs) == 12 and all(r.preemptions == 0 for r in jobs)
    line = result.timeline
    for t, pending, running in zip(line.times, line.pending, line.running, strict=True):
        assert pending == sum(r.submit_time <= t < (r.start_time or 0.0) for r in jobs), t
        assert running == sum((r.start_time or 0.0) <= t < (r.end_time or 0.0) for r in jobs), t
    assert any(t % 60 for t in line.times)  # points between the ticks were checked too
