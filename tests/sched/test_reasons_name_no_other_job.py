"""A waiting or preemption reason never names another job by its id.

A job's owner reads its reasons (``danlu jobs``, ``GET /jobs/{id}``, the event log), and a
user who is not an admin may not see other users' job ids anywhere (``GET /jobs`` and
``GET /cluster/nodes`` hide them). A reason that points at another job (the one a strict
queue waits behind, the one a reservation holds GPUs for, the one a preemption frees GPUs
for, the running job a start would displace) names it by its project instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, Node
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

HOUR = 3600.0


def _pending(
    job_id: str, project: str, gpus: int, seq: int, submit_time: float | None = None, **kw: Any
) -> JobStatus:
    submit = float(seq) if submit_time is None else submit_time
    request = JobRequest(id=job_id, submit_time=submit, gpus=gpus, seq=seq, project=project, **kw)
    return JobStatus(request)


def _running(
    job_id: str, project: str, gpus: Iterable[tuple[int, int]], seq: int, **kw: Any
) -> JobStatus:
    shares = list(gpus)
    request = JobRequest(
        id=job_id, submit_time=0.0, gpus=len(shares), seq=seq, project=project, **kw
    )
    return JobStatus(request, Allocation.whole_gpus(shares), last_start=0.0)


def _reasons(plan: Plan, jobs: Iterable[JobStatus]) -> dict[str, str]:
    """Each job's reason: its own waiting reason, else the round's shared one, and for a
    preempted job its preemption's."""
    said = {job.id: plan.reason(job.id) or "" for job in jobs}
    said.update({p.job_id: p.reason for p in plan.preempts})
    return said


def _assert_no_other_job_named(plan: Plan, jobs: tuple[JobStatus, ...]) -> None:
    for job_id, reason in _reasons(plan, jobs).items():
        for other in jobs:
            assert other.id == job_id or other.id not in reason, (job_id, reason)


def test_strict_fifo_names_the_project_of_the_job_it_queues_behind() -> None:
    held = _running("job-7c1e", "ops", [(0, 0), (0, 1)], 0)
    pending = (_pending("job-wide-31", "vision", 4, 1), _pending("job-mine-52", "nlp", 1, 2))
    plan = FifoPolicy().schedule(
        ClusterView(0.0, Cluster.homogeneous(1, 4), running=(held,), pending=pending)
    )
    assert plan.reason("job-mine-52") == (
        "queued behind a job of project vision (strict order, no backfill)"
    )
    _assert_no_other_job_named(plan, (held, *pending))


def test_a_reservation_names_the_project_it_holds_gpus_for() -> None:
    # node 0 frees at t=100; wide (6 GPUs) is reserved then; long (500 s) would delay it
    running = (
        _running("job-r0-8a", "ops", [(0, g) for g in range(4)], 0, expected_duration=100.0),
        _running("job-r1-9b", "ops", [(1, 0), (1, 1)], 1, expected_duration=1000.0),
    )
    pending = (
        _pending("job-wide-31", "vision", 6, 2, expected_duration=300.0),
        _pending("job-long-44", "nlp", 2, 3, expected_duration=500.0),
    )
    plan = FifoPolicy(backfill=True, reserve=True).schedule(
        ClusterView(0.0, Cluster.homogeneous(2, 4), running=running, pending=pending)
    )
    assert plan.starts == ()
    assert plan.reason("job-long-44") == (
        "backfill holds GPUs for a job of project vision (reserved to start in 100s)"
    )
    _assert_no_other_job_named(plan, (*running, *pending))


def test_fair_share_without_backfill_names_the_project_it_queues_behind() -> None:
    pending = (_pending("job-wide-31", "vision", 4, 1), _pending("job-mine-52", "nlp", 1, 2))
    plan = FairSharePolicy(backfill=False).schedule(
        ClusterView(0.0, Cluster.homogeneous(1, 2), pending=pending)
    )
    assert plan.reason("job-mine-52") == (
        "queued behind a job of project vision (fair share, no backfill)"
    )
    _assert_no_other_job_named(plan, pending)


def test_a_fair_share_preemption_names_the_project_it_frees_gpus_for() -> None:
    team_a = tuple(_running(f"job-a{i}-77", "vision", [(0, i)], i) for i in range(4))
    pending = tuple(_pending(f"job-b{i}-88", "nlp", 1, 10 + i) for i in range(3))
    plan = FairSharePolicy(reclaim=True, min_run=300.0).schedule(
        ClusterView(1000.0, Cluster.homogeneous(1, 4), running=team_a, pending=pending)
    )
    assert [(p.job_id, p.reason) for p in plan.preempts] == [
        ("job-a3-77", "fair share: GPUs reclaimed for a job of project nlp")
    ]
    _assert_no_other_job_named(plan, (*team_a, *pending))


def test_priority_names_the_project_of_a_running_job_it_would_not_preempt() -> None:
    """Strict order (no backfill) with aging: mine, of the running job's priority, comes
    first in the aged queue; wide (6 GPUs, the running ops job not preemptible for it)
    holds back nlp's job, so only mine is left on the victim's GPUs, and a job of no higher
    priority preempts no one: it waits, told whose GPUs it would take."""
    now = 100 * HOUR
    running = (
        _running("job-ops-61", "ops", [(0, g) for g in range(4)], 0, priority=9),
        _running("job-vic-62", "vision", [(0, g) for g in range(4, 8)], 1, priority=1),
    )
    pending = (
        _pending("job-mine-52", "mine", 2, 2, priority=1, submit_time=0.0),
        _pending("job-wide-31", "big", 6, 3, priority=6, submit_time=now - 10),
        _pending("job-nlp-93", "nlp", 2, 4, priority=5, submit_time=now - 5),
    )
    plan = PriorityPolicy(backfill=False).schedule(
        ClusterView(now, Cluster.homogeneous(1, 8), running=running, pending=pending)
    )
    assert plan.starts == () and plan.preempts == ()
    assert plan.reason("job-mine-52") == (
        "would take the GPUs of a job of project vision, of no lower priority: not preempted for it"
    )
    _assert_no_other_job_named(plan, (*running, *pending))


def test_priority_names_the_project_of_a_higher_ranked_job_a_start_would_displace() -> None:
    """The H100 jobs rank above the A100 node's job and take its budget but cannot be
    placed (the H100 node is held at priority 9); mine, ranked below it, fits the budget
    left and is placed on its GPUs: it waits, and the job keeps running."""
    cluster = Cluster((Node("n0", 4, GPU_TYPES["A100-80GB"]), Node("n1", 4, GPU_TYPES["H100"])))
    running = (
        _running("job-vic-62", "vision", [(0, g) for g in range(4)], 0, priority=3),
        _running("job-ops-61", "ops", [(1, g) for g in range(4)], 1, priority=9),
    )
    h100 = frozenset({"H100"})
    pending = (
        *(_pending(f"job-h{k}-70", "hpc", 1, 2 + k, priority=5, gpu_types=h100) for k in range(13)),
        _pending("job-mine-52", "mine", 1, 30, priority=2),
    )
    plan = PriorityPolicy().schedule(ClusterView(10.0, cluster, running=running, pending=pending))
    assert plan.starts == () and plan.preempts == ()
    assert plan.reason("job-mine-52") == (
        "outranked: would take the GPUs of a job of project vision, which ranks higher"
    )
    _assert_no_other_job_named(plan, (*running, *pending))
