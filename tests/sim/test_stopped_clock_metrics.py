"""The summary of a run whose clock stopped at ``SimConfig.max_time`` with jobs unfinished,
and the jobs the stop leaves out.

Before: the utilisation counted only finished jobs' work while the allocation ratio counted
every job's GPUs (so GPUs busy with useful work read as idle), the window both were taken
over started at the first *finished* job's submission and ended at the last end (not at the
stop, though jobs held GPUs until then), a job that could never run submitted after the stop
was listed as rejected (a rejection at a submission the clock never reached), and a negative
``max_time`` was taken (an empty run)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, Plan, Preempt
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.workload import RigidWork, Workload, WorkloadJob


def rigid(name: str, submit: float, duration: float, seq: int, gpus: int = 1) -> WorkloadJob:
    request = JobRequest(
        id=name, submit_time=submit, gpus=gpus, seq=seq, expected_duration=duration
    )
    return WorkloadJob(request, RigidWork(duration))


def simulate(jobs: list[WorkloadJob], policy: object = None, **config: object) -> SimResult:
    """``jobs`` on one node of 2 GPUs under fifo (a round every 60 s)."""
    chosen = make_policy("fifo") if policy is None else policy
    workload = Workload("w", "danlu", tuple(jobs))
    settings = SimConfig(**config)  # type: ignore[arg-type]
    return Simulator(Cluster.homogeneous(1, 2), chosen, workload, settings).run()  # type: ignore[arg-type]


# -- 1. utilisation counts the unfinished jobs' work, as the allocation counts their GPUs ----


def test_utilisation_counts_the_work_of_jobs_unfinished_at_the_stop() -> None:
    """Both start at 60 s; short ends at 160 s, long runs on to the stop at 1000 s: every
    allocated GPU-second did useful work, so utilisation equals the allocation ratio (0.52
    of 2 x 1000 GPU-seconds). Before: 0.3125 (short's 100 GPU-seconds over 2 x 160),
    against an allocation ratio of 0.625."""
    jobs = [rigid("long", 0.0, 10_000.0, 0), rigid("short", 0.0, 100.0, 1)]
    result = simulate(jobs, max_time=1000.0)
    assert [r.id for r in result.jobs] == ["short"] and result.unfinished == ["long"]
    summary = result.summary()
    assert summary["gpu_utilization"] == pytest.approx(summary["gpu_allocation_ratio"])
    assert summary["gpu_utilization"] == pytest.approx((2 * 100 + 840) / 2000)
    assert summary["makespan"] == 1000.0
    assert summary["avg_jct"] == 160.0  # JCTs are still the finished jobs'
    (long,) = result.unfinished_records
    assert long.id == "long" and long.end_time is None and math.isnan(long.jct)
    assert long.gpu_seconds == pytest.approx(940.0) and long.start_time == 60.0


@dataclass(frozen=True)
class PreemptAt:
    """fifo, but every running job is preempted in the round at ``at`` seconds."""

    at: float
    name: str = "preempt-at"

    def schedule(self, view: ClusterView) -> Plan:
        if view.time == self.at:
            return Plan(preempts=tuple(Preempt(j.request.id, "test") for j in view.running))
        return make_policy("fifo").schedule(view)


def test_an_unfinished_jobs_restart_up_to_the_stop_is_not_useful_work() -> None:
    """long runs 60-120 s, is preempted, restarts at 180 s paying 30 s, and runs to the stop
    at 1000 s: 880 GPU-seconds held, 30 of them restarting, so 850 of 2000 useful."""
    jobs = [rigid("long", 0.0, 10_000.0, 0)]
    result = simulate(jobs, PreemptAt(120.0), max_time=1000.0, restart_cost=30.0)
    summary = result.summary()
    assert summary["gpu_utilization"] == pytest.approx(850.0 / 2000.0)
    assert summary["gpu_allocation_ratio"] == pytest.approx(880.0 / 2000.0)
    (long,) = result.unfinished_records
    assert long.preemptions == 1 and long.start_time == 60.0
    assert long.gpu_seconds == pytest.approx(880.0)
    assert long.restart_gpu_seconds == pytest.approx(30.0)  # settled at the stop


@pytest.mark.parametrize("max_time", [100.0, 170.0, 200.0, 215.0, 260.0, 400.0, 1000.0])
def test_utilisation_never_passes_the_allocation_ratio(max_time: float) -> None:
    jobs = [
        rigid("a", 0.0, 100.0, 0, gpus=2),
        rigid("b", 10.0, 50.0, 1),
        rigid("c", 120.0, 300.0, 2),
        rigid("d", 240.0, 60.0, 3, gpus=2),
    ]
    summary = simulate(jobs, PreemptAt(180.0), max_time=max_time).summary()
    assert 0.0 < summary["gpu_utilization"] <= summary["gpu_allocation_ratio"] + 1e-12


# -- 2. the window starts at the first submission, finished or not --------------------------


def test_the_window_starts_at_an_unfinished_first_submission() -> None:
    """long (submitted at 0 s) runs 60 s to the stop at 1000 s; short runs 300-400 s. The
    window was short's alone, 300-400 s: a makespan of 100 s, with long's 940 GPU-seconds
    mostly outside it."""
    jobs = [rigid("long", 0.0, 10_000.0, 0), rigid("short", 300.0, 100.0, 1)]
    summary = simulate(jobs, max_time=1000.0).summary()
    assert summary["makespan"] == 1000.0
    assert summary["gpu_allocation_ratio"] == pytest.approx((940.0 + 100.0) / 2000.0)
    assert summary["gpu_utilization"] == pytest.approx((940.0 + 100.0) / 2000.0)
    assert summary["avg_jct"] == 100.0


def test_a_stop_with_no_job_finished_still_has_a_window() -> None:
    """No job finished: the makespan and the utilisation read 0 though a GPU was busy."""
    summary = simulate([rigid("long", 0.0, 10_000.0, 0)], max_time=1000.0).summary()
    assert summary["makespan"] == 1000.0
    assert summary["gpu_utilization"] == pytest.approx(940.0 / 2000.0)
    assert summary["gpu_allocation_ratio"] == pytest.approx(940.0 / 2000.0)
    assert math.isnan(summary["avg_jct"])


def test_a_run_that_ends_before_the_stop_keeps_its_window() -> None:
    """Every job ended by 160 s: the stop at 1000 s adds no idle time to the window."""
    jobs = [rigid("a", 0.0, 100.0, 0), rigid("b", 0.0, 100.0, 1)]
    stopped = simulate(jobs, max_time=1000.0).summary()
    assert stopped == simulate(jobs).summary()
    assert stopped["makespan"] == 160.0


# -- 3. a job that could never run, submitted after the stop ---------------------------------


@pytest.mark.parametrize(
    ("submit", "max_time", "not_submitted", "rejected"),
    [
        (500.0, 200.0, ["late", "huge"], []),  # its submission never came
        (200.0, 200.0, ["late"], ["huge"]),  # the clock reached it
        (500.0, math.inf, [], ["huge"]),
    ],
)
def test_a_job_that_never_fits_is_rejected_only_once_submitted(
    submit: float, max_time: float, not_submitted: list[str], rejected: list[str]
) -> None:
    """huge asks for 8 GPUs of 2. Before, it was rejected even when submitted after the
    stop, while late, submitted before it, was not submitted."""
    late = (300.0, "late", 1)
    huge = (submit, "huge", 8)
    timed = sorted([late, huge])
    jobs = [rigid("a", 0.0, 10.0, 0)]
    jobs += [rigid(name, at, 10.0, seq, gpus) for seq, (at, name, gpus) in enumerate(timed, 1)]
    result = simulate(jobs, max_time=max_time)
    assert result.not_submitted == not_submitted
    assert [job_id for job_id, _ in result.rejected] == rejected
    listed = [r.id for r in result.jobs] + result.unfinished + result.not_submitted + rejected
    assert sorted(listed) == sorted(j.request.id for j in jobs)


# -- 4. a negative max_time ------------------------------------------------------------------


@pytest.mark.parametrize("max_time", [-1.0, -math.inf])
def test_a_negative_max_time_is_refused_naming_it(max_time: float) -> None:
    with pytest.raises(ConfigError, match=r"max_time must be >= 0 seconds"):
        SimConfig(max_time=max_time)
