"""With ``reserve`` (EASY backfill) a job that could never be placed (more GPUs
than the open cluster has, a GPU type or memory size none has) held the round's one
reservation: finding no room for it, the round backfilled greedily, and the wide job behind
it, which could start once the running jobs end, waited behind every small job for ever.
Such a job now holds no reservation: the next job that cannot start gets it."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.core.units import GiB
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.policies.queue_round import queue_pass
from danlu.sched.policies.sjf import SjfPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

ONE_BY_4 = Cluster.homogeneous(1, 4)
TWO_BY_4 = Cluster.homogeneous(2, 4)


def _req(job_id: str, gpus: int, seq: int, duration: float | None, **kw: Any) -> JobRequest:
    return JobRequest(
        id=job_id, submit_time=float(seq), gpus=gpus, seq=seq, expected_duration=duration, **kw
    )


def _running(job_id: str, gpus: int, duration: float, priority: int = 0) -> JobStatus:
    alloc = Allocation.whole_gpus([(0, g) for g in range(gpus)])
    return JobStatus(_req(job_id, gpus, -1, duration, priority=priority), alloc, last_start=0.0)


def _started(plan: Plan) -> list[str]:
    return [s.job_id for s in plan.starts]


IMPOSSIBLE = {
    "too-many-gpus": {"gpus": 8},
    "unknown-type": {"gpus": 1, "gpu_types": frozenset({"H100"})},
    "memory-none-has": {"gpus": 1, "gpu_memory": 1024 * GiB},
    "share-memory-none-has": {"gpus": 1, "gpu_milli": 500, "gpu_memory": 1024 * GiB},
}

POLICIES = {
    "fifo": lambda: FifoPolicy(backfill=True, reserve=True),
    "sjf": lambda: SjfPolicy(reserve=True, by_gpu_time=False),
    "priority": lambda: PriorityPolicy(reserve=True),
    "priority-no-preempt": lambda: PriorityPolicy(reserve=True, preempt=False),
}


@pytest.mark.parametrize("kind", sorted(IMPOSSIBLE))
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_job_that_can_never_start_holds_no_reservation(name: str, kind: str) -> None:
    # 2 of the 4 GPUs held until t=100; the queue: the impossible job, then wide (4 GPUs,
    # could start at t=100), then small (1 GPU for 1000 s: it would delay wide)
    running = (_running("r", 2, 100.0),)
    pending = (
        JobStatus(_req("never", seq=0, duration=10.0, **IMPOSSIBLE[kind])),
        JobStatus(_req("wide", 4, 1, 100.0)),
        JobStatus(_req("small", 1, 2, 1000.0)),
    )
    plan = POLICIES[name]().schedule(ClusterView(10.0, ONE_BY_4, running=running, pending=pending))
    assert _started(plan) == []  # small started before (greedy backfill): wide starved
    assert (
        plan.reason("small")
        == "backfill holds GPUs for a job of project default (reserved to start in 90s)"
    )
    # a job short enough to end before the reservation still starts
    quick = JobStatus(_req("quick", 1, 3, 50.0))
    plan = POLICIES[name]().schedule(
        ClusterView(10.0, ONE_BY_4, running=running, pending=(*pending, quick))
    )
    assert _started(plan) == ["quick"]


def test_the_queue_pass_names_the_reserved_job_behind_one_that_can_never_start() -> None:
    running = (_running("r", 2, 100.0),)
    pending = (
        JobStatus(_req("never", 8, 0, 10.0)),
        JobStatus(_req("never-too", 1, 1, 10.0, gpu_types=frozenset({"H100"}))),
        JobStatus(_req("wide", 4, 2, 100.0)),
        JobStatus(_req("small", 1, 3, 1000.0)),
    )
    view = ClusterView(10.0, ONE_BY_4, running=running, pending=pending)
    plan, blocker = queue_pass(view, list(pending), "best-fit", backfill=True, reserve=True)
    assert blocker == "wide"
    assert _started(plan) == []
    # every GPU taken: the reservation a preempting caller asks for is wide's, not never's
    full = (_running("r", 4, 100.0),)
    view = ClusterView(10.0, ONE_BY_4, running=full, pending=pending)
    _, blocker = queue_pass(
        view, list(pending), "best-fit", backfill=True, reserve=True, reserve_when_full=True
    )
    assert blocker == "wide"


def test_strict_order_still_stops_at_a_job_that_does_not_fit() -> None:
    """Without backfill the first job that does not fit holds the queue back, as documented:
    only the reservation is no longer a never-placeable job's."""
    running = (_running("r", 2, 100.0),)
    pending = (JobStatus(_req("never", 8, 0, 10.0)), JobStatus(_req("one", 1, 1, 10.0)))
    view = ClusterView(10.0, ONE_BY_4, running=running, pending=pending)
    plan = FifoPolicy().schedule(view)
    assert _started(plan) == []
    assert (
        plan.reason("one") == "queued behind a job of project default (strict order, no backfill)"
    )


def test_priority_preempts_for_a_job_behind_one_that_can_never_start() -> None:
    # every GPU held by a preemptible job of priority 0; never (8 GPUs) and mid (2 GPUs) of
    # priority 5: mid preempts r, with or without reserve
    running = (_running("r", 4, 100.0),)
    pending = (
        JobStatus(_req("never", 8, 0, 10.0, priority=5)),
        JobStatus(_req("mid", 2, 1, 100.0, priority=5)),
    )
    view = ClusterView(10.0, ONE_BY_4, running=running, pending=pending)
    for policy in (PriorityPolicy(), PriorityPolicy(reserve=True)):
        plan = policy.schedule(view)
        assert _started(plan) == ["mid"]
        assert [p.job_id for p in plan.preempts] == ["r"]


def test_a_job_that_fits_only_on_closed_gpus_cannot_hold_it_either() -> None:
    # node 1 is closed: 4 open GPUs, 2 of them held until t=100
    running = (_running("r", 2, 100.0),)
    pending = (
        JobStatus(_req("six", 6, 0, 10.0)),
        JobStatus(_req("wide", 4, 1, 100.0)),
        JobStatus(_req("small", 1, 2, 1000.0)),
    )
    view = ClusterView(
        10.0, TWO_BY_4, running=running, pending=pending, closed_nodes=frozenset({1})
    )
    plan = FifoPolicy(backfill=True, reserve=True).schedule(view)
    assert _started(plan) == []
    assert (plan.reason("small") or "").startswith(
        "backfill holds GPUs for a job of project default"
    )
    # node 1 open again: six fits at once (the closed GPUs were what it lacked)
    view = ClusterView(10.0, TWO_BY_4, running=running, pending=pending)
    plan = FifoPolicy(backfill=True, reserve=True).schedule(view)
    assert _started(plan)[0] == "six"


def test_never_fits_answers() -> None:
    from danlu.sched.policies.reservation import NeverFits  # new in review 89

    view = ClusterView(0.0, TWO_BY_4, running=(_running("r", 4, 100.0),))
    never = NeverFits(view)
    assert not never(_req("a", 8, 0, None))  # the running job's GPUs count as free
    assert never(_req("b", 9, 0, None))
    assert not never(_req("c", 1, 0, None, gpu_milli=300))
    assert never(_req("d", 1, 0, None, gpu_types=frozenset({"H100"})))
    assert not never(_req("a2", 8, 1, None))  # asked twice: the empty map is unchanged
