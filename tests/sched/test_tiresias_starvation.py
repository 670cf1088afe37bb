"""Tiresias' starvation guard: a promoted job goes back to queue 0 with its service counted
from zero, and stays there while it runs (the marks of its start record the promotion)."""

from __future__ import annotations

from dataclasses import replace

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies.tiresias import ENTERED, QUEUE, STOPPED, TiresiasPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

CLUSTER = Cluster.homogeneous(1, 1)


def _policy() -> TiresiasPolicy:
    return TiresiasPolicy(thresholds=(100.0,), starvation_factor=1.0, placement="best-fit")


def _apply(view: ClusterView, plan: Plan, now: float) -> ClusterView:
    """The next view, ``now``, after ``plan``: as the simulator applies it (starts, then
    preemptions, then the plan's marks merged into the jobs' marks)."""
    started = {s.job_id: s.allocation for s in plan.starts}
    stopped = {p.job_id for p in plan.preempts}
    running: list[JobStatus] = []
    pending: list[JobStatus] = []
    for job in view.running:
        marks = {**job.marks, **plan.marks.get(job.id, {})}
        if job.id in stopped:
            pending.append(
                replace(
                    job,
                    allocation=Allocation(),
                    attained_service=job.attained_at(view.time),
                    run_time=job.run_time_at(view.time),
                    marks=marks,
                )
            )
        else:
            running.append(replace(job, marks=marks))
    for job in view.pending:
        marks = {**job.marks, **plan.marks.get(job.id, {})}
        if job.id in started:
            running.append(
                replace(job, allocation=started[job.id], last_start=view.time, marks=marks)
            )
        else:
            pending.append(replace(job, marks=marks))
    pending.sort(key=lambda j: j.request.seq)
    return ClusterView(now, CLUSTER, running=tuple(running), pending=tuple(pending))


def _starved_and_newcomer() -> ClusterView:
    # A ran 200 GPU-s (queue 1 since service 100) and was preempted at t=200 by Tiresias;
    # B (queue 0) has run since 950.
    a = JobStatus(
        JobRequest("A", 0.0, 1, seq=0),
        attained_service=200.0,
        run_time=200.0,
        last_start=0.0,
        marks={QUEUE: 1.0, ENTERED: 100.0, STOPPED: 200.0},
    )
    b = JobStatus(
        JobRequest("B", 500.0, 1, seq=1),
        Allocation.whole_gpus([(0, 0)]),
        last_start=950.0,
    )
    return ClusterView(1000.0, CLUSTER, running=(b,), pending=(a,))


def test_a_promoted_job_keeps_queue_0_once_it_runs() -> None:
    view = _starved_and_newcomer()
    plan = _policy().schedule(view)
    assert [s.job_id for s in plan.starts] == ["A"]
    assert [p.job_id for p in plan.preempts] == ["B"]
    view = _apply(view, plan, 1001.0)
    (a,) = view.running
    assert _policy().queue_of(a, 1001.0)[0] == 0
    plan = _policy().schedule(view)
    assert plan.starts == () and plan.preempts == ()  # no thrash: A keeps its GPU
    # Service counted from zero: A is demoted once it has run 100 GPU-s more.
    assert _policy().queue_of(a, 1099.0)[0] == 0
    assert _policy().queue_of(a, 1101.0) == (1, 1100.0)


def test_a_job_stopped_twice_waits_from_its_last_stop() -> None:
    view = _starved_and_newcomer()
    view = _apply(view, _policy().schedule(view), 1001.0)  # A starts at 1000
    (a,) = view.running
    # A is demoted at 1100 (100 GPU-s after its promotion); B, queue 0, preempts it then.
    view = _apply(view, Plan(), 1150.0)
    plan = _policy().schedule(view)
    assert [p.job_id for p in plan.preempts] == ["A"]
    assert plan.marks["A"][STOPPED] == 1150.0
    view = _apply(view, plan, 1151.0)
    (a,) = (j for j in view.pending if j.id == "A")
    assert a.run_time == 350.0
    # Waited 1 x its 350 s of run time since it stopped at 1150 (not since 1000 + 350).
    assert _policy()._promotion_time(a) == 1150.0 + 350.0
