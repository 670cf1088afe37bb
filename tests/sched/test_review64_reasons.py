"""A job asking for no GPU is told so (not that the free GPUs are fragmented) by
the queue and ranked policies, and under strict order it does not block the jobs behind it:
it can never start (the placer places nothing for a count of 0)."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.placement.gang import FreeMap
from danlu.sched.policies.base import NO_GPU_ASKED, queue_pass, why_not
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.policies.sjf import SjfPolicy
from danlu.sched.policies.tiresias import TiresiasPolicy
from danlu.sched.policies.value_density import ValueDensityPolicy
from danlu.sched.policies.waiting import never_starts
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

ONE_BY_4 = Cluster.homogeneous(1, 4)
TWO_BY_4 = Cluster.homogeneous(2, 4)


def _pending(job_id: str, gpus: int, seq: int, **kw: Any) -> JobStatus:
    return JobStatus(JobRequest(id=job_id, submit_time=float(seq), gpus=gpus, seq=seq, **kw))


def _running(job_id: str, gpus_at: list[tuple[int, int]], seq: int, **kw: Any) -> JobStatus:
    req = JobRequest(id=job_id, submit_time=float(seq), gpus=len(gpus_at), seq=seq, **kw)
    return JobStatus(req, Allocation.whole_gpus(gpus_at), last_start=0.0)


def _started(plan: Plan) -> list[str]:
    return [s.job_id for s in plan.starts]


def _zero_then_one() -> ClusterView:
    """An empty 4-GPU node; the queue: ``zero`` (no GPU) first, then ``one`` (1 GPU)."""
    pend = (_pending("zero", 0, 1), _pending("one", 1, 2))
    return ClusterView(0.0, ONE_BY_4, pending=pend)


@pytest.mark.parametrize("placement", ["best-fit", "worst-fit", "fgd"])
def test_why_not_says_the_job_asks_for_no_gpu(placement: str) -> None:
    free = FreeMap(ClusterView(0.0, ONE_BY_4), placement)
    assert why_not(free, _pending("z", 0, 1)) == NO_GPU_ASKED
    # a share of no GPU as well (part of a GPU by milli or by memory, count 0)
    assert why_not(free, _pending("m", 0, 2, gpu_milli=500)) == NO_GPU_ASKED
    assert why_not(free, _pending("t", 0, 3, gpu_types=frozenset({"T4"}))) == NO_GPU_ASKED
    # and the other reasons are as they were
    assert why_not(free, _pending("w", 8, 4)) == "needs 8 GPUs, 4 free"


QUEUE_POLICIES = [
    FifoPolicy(),  # strict order
    FifoPolicy(backfill=True),
    FifoPolicy(backfill=True, reserve=True),
    SjfPolicy(backfill=False),
    SjfPolicy(),
    PriorityPolicy(backfill=False, preempt=False),
    PriorityPolicy(backfill=False),
    PriorityPolicy(),
    FairSharePolicy(),
    TiresiasPolicy(),
    ValueDensityPolicy(),
]


@pytest.mark.parametrize(
    "policy", QUEUE_POLICIES, ids=lambda p: f"{p.name}-{getattr(p, 'backfill', '')}"
)
def test_a_job_asking_for_no_gpu_waits_with_that_reason_and_blocks_nothing(policy: Any) -> None:
    for _ in range(2):  # the ranked policies keep their lists across rounds
        plan = policy.schedule(_zero_then_one())
        assert _started(plan) == ["one"]
        assert plan.reason("zero") == NO_GPU_ASKED
        assert plan.reason("one") is None


def test_strict_fifo_skips_zero_gpu_jobs_but_still_blocks_on_a_real_one() -> None:
    # queue: zero, wide (8 GPUs: cannot start on 4), zero2, one
    pend = (
        _pending("zero", 0, 1),
        _pending("wide", 8, 2),
        _pending("zero2", 0, 3),
        _pending("one", 1, 4),
    )
    plan = FifoPolicy().schedule(ClusterView(0.0, ONE_BY_4, pending=pend))
    assert _started(plan) == []
    assert plan.reason("zero") == NO_GPU_ASKED
    # it says it could never start (the cluster has 4 GPUs)
    assert plan.reason("wide") == never_starts("needs 8 GPUs, 4 free")
    # behind the real blocker everything waits for it, as before
    assert (
        plan.reason("one") == "queued behind a job of project default (strict order, no backfill)"
    )


def test_the_job_holding_back_the_queue_is_never_one_asking_for_no_gpu() -> None:
    """Strict order with every GPU taken: the job named as holding back the rest (what
    ``priority`` keeps the queue order by) is the first that asks for GPUs."""
    full = (_running("r", [(0, g) for g in range(4)], 0, expected_duration=100.0),)
    pend = (_pending("zero", 0, 1), _pending("one", 1, 2))
    view = ClusterView(0.0, ONE_BY_4, running=full, pending=pend)
    plan, blocker = queue_pass(view, list(pend), "best-fit", backfill=False)
    assert _started(plan) == []
    assert blocker == "one"
    # only zero-GPU jobs left: nothing holds the queue back
    plan, blocker = queue_pass(view, list(pend[:1]), "best-fit", backfill=False)
    assert blocker is None
    assert plan.reason("zero") == NO_GPU_ASKED


def test_easy_backfill_reserves_for_the_first_job_that_asks_for_gpus() -> None:
    # node 0 full until t=100, node 1 half full until t=1000; zero (no GPU) comes first,
    # then wide (6 GPUs, reserved at t=100), then long (2 GPUs, 500 s: would delay wide)
    running = (
        _running("r0", [(0, g) for g in range(4)], -2, expected_duration=100.0),
        _running("r1", [(1, 0), (1, 1)], -1, expected_duration=1000.0),
    )
    pend = (
        _pending("zero", 0, 1),
        _pending("wide", 6, 2, expected_duration=300.0),
        _pending("long", 2, 3, expected_duration=500.0),
    )
    view = ClusterView(0.0, TWO_BY_4, running=running, pending=pend)
    plan, blocker = queue_pass(view, list(pend), "best-fit", backfill=True, reserve=True)
    assert blocker == "wide"
    assert _started(plan) == []
    assert plan.reason("zero") == NO_GPU_ASKED
    assert (plan.reason("long") or "").startswith(
        "backfill holds GPUs for a job of project default"
    )
    # and with every GPU taken, the reservation a preempting caller asks for is wide's too
    full = (
        _running("r0", [(0, g) for g in range(4)], -2, expected_duration=100.0),
        _running("r1", [(1, g) for g in range(4)], -1, expected_duration=1000.0),
    )
    view = ClusterView(0.0, TWO_BY_4, running=full, pending=pend)
    _, blocker = queue_pass(
        view, list(pend), "best-fit", backfill=True, reserve=True, reserve_when_full=True
    )
    assert blocker == "wide"


@pytest.mark.parametrize(
    "policy", [TiresiasPolicy(), ValueDensityPolicy(), PriorityPolicy()], ids=lambda p: p.name
)
def test_a_zero_gpu_job_ranked_first_preempts_nothing(policy: Any) -> None:
    # every GPU held by a preemptible job; zero ranks above it (priority, service, value)
    full = (_running("r", [(0, g) for g in range(4)], 0, expected_duration=1e6),)
    pend = (_pending("zero", 0, 1, priority=10, gpu_milli=500),)
    view = ClusterView(10.0, ONE_BY_4, running=full, pending=pend)
    for _ in range(2):
        plan = policy.schedule(view)
        assert _started(plan) == [] and list(plan.preempts) == []
        assert plan.reason("zero") == NO_GPU_ASKED


def test_fair_share_reason_for_a_zero_gpu_job() -> None:
    pend = (
        _pending("zero", 0, 1, project="a"),
        _pending("one", 1, 2, project="b"),
    )
    plan = FairSharePolicy().schedule(ClusterView(0.0, ONE_BY_4, pending=pend))
    assert _started(plan) == ["one"]
    assert plan.reason("zero") == NO_GPU_ASKED


def test_fair_share_without_backfill_is_not_blocked_by_a_zero_gpu_job() -> None:
    plan = FairSharePolicy(backfill=False).schedule(_zero_then_one())
    assert _started(plan) == ["one"]


def test_strict_priority_preempts_past_a_zero_gpu_job() -> None:
    full = (_running("r", [(0, g) for g in range(4)], 0, priority=0),)
    pend = (_pending("zero", 0, 1, priority=5), _pending("hi", 4, 2, priority=5))
    view = ClusterView(0.0, ONE_BY_4, running=full, pending=pend)
    plan = PriorityPolicy(backfill=False).schedule(view)
    assert _started(plan) == ["hi"] and [p.job_id for p in plan.preempts] == ["r"]


@pytest.mark.parametrize("milli", [1000, 500])
def test_a_zero_gpu_job_does_not_stand_in_the_way_of_a_preemption(milli: int) -> None:
    # r has had a lot of service (Tiresias' lower queue); hi (4 GPUs, none yet) outranks it,
    # and so does zero, which asks for no GPU (whole or part): hi starts in r's place
    req = JobRequest(id="r", submit_time=0.0, gpus=4, seq=0)
    r = JobStatus(
        req,
        Allocation.whole_gpus([(0, g) for g in range(4)]),
        last_start=0.0,
        attained_service=1e6,
    )
    pend = (_pending("zero", 0, 1, gpu_milli=milli), _pending("hi", 4, 2))
    view = ClusterView(10.0, ONE_BY_4, running=(r,), pending=pend)
    plan = TiresiasPolicy().schedule(view)
    assert _started(plan) == ["hi"] and [p.job_id for p in plan.preempts] == ["r"]
    assert plan.reason("zero") == NO_GPU_ASKED
