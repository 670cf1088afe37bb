"""Policies: ordering, blocking, preemption, Tiresias queues, value density, registry."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.cluster import Allocation, Cluster, GpuType, Node
from danlu.core.errors import ConfigError, PlacementError, UnknownNameError
from danlu.core.units import GiB
from danlu.sched.placement.gang import STRATEGIES, FreeMap
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.policies.sjf import SjfPolicy
from danlu.sched.policies.tiresias import ENTERED, QUEUE, TiresiasPolicy
from danlu.sched.policies.value_density import ValueDensityPolicy
from danlu.sched.registry import PolicyRegistry, default_registry, make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

SEQ = iter(range(10**9))


def request(job_id: str, gpus: int = 1, submit: float = 0.0, **kw: Any) -> JobRequest:
    return JobRequest(id=job_id, submit_time=submit, gpus=gpus, seq=next(SEQ), **kw)


def pending(job_id: str, gpus: int = 1, submit: float = 0.0, **kw: Any) -> JobStatus:
    status_kw = {k: kw.pop(k) for k in ("marks", "attained_service", "run_time") if k in kw}
    return JobStatus(request(job_id, gpus, submit, **kw), **status_kw)


def running(
    job_id: str,
    gpus_at: list[tuple[int, int]],
    submit: float = 0.0,
    last_start: float = 0.0,
    **kw: Any,
) -> JobStatus:
    status_kw = {k: kw.pop(k) for k in ("marks", "attained_service", "run_time") if k in kw}
    return JobStatus(
        request(job_id, len(gpus_at), submit, **kw),
        Allocation.whole_gpus(gpus_at),
        last_start=last_start,
        **status_kw,
    )


def view(
    cluster: Cluster,
    run: tuple[JobStatus, ...] = (),
    pend: tuple[JobStatus, ...] = (),
    now: float = 0.0,
) -> ClusterView:
    return ClusterView(now, cluster, running=run, pending=pend)


def waiting(plan: Plan, pending_ids: Iterable[str]) -> set[str]:
    """Pending jobs the plan leaves waiting with a reason (listed or the shared default)."""
    return {j for j in pending_ids if plan.reason(j) is not None}


def started(plan: Plan) -> list[str]:
    return [s.job_id for s in plan.starts]


def preempted(plan: Plan) -> list[str]:
    return [p.job_id for p in plan.preempts]


ONE_BY_4 = Cluster.homogeneous(1, 4)
ONE_BY_2 = Cluster.homogeneous(1, 2)


# ---------------------------------------------------------------------------- fifo
def test_fifo_strict_order_blocks() -> None:
    hold = running("hold", [(0, 0), (0, 1)])
    big = pending("big", 4, submit=0.0)
    small = pending("small", 1, submit=1.0)
    plan = FifoPolicy().schedule(view(ONE_BY_4, (hold,), (small, big)))  # list order ignored
    assert started(plan) == []
    assert (plan.reason("big") or "") == "needs 4 GPUs, 2 free"
    assert "queued behind a job of project default" in (plan.reason("small") or "")
    assert plan.preempts == () and plan.recheck_at == math.inf


def test_fifo_backfill_lets_a_later_job_start() -> None:
    hold = running("hold", [(0, 0), (0, 1)])
    pend = (pending("big", 4, submit=0.0), pending("small", 1, submit=1.0))
    plan = FifoPolicy(backfill=True).schedule(view(ONE_BY_4, (hold,), pend))
    assert started(plan) == ["small"]
    assert waiting(plan, ["big", "small"]) == {"big"}


def test_fifo_starts_in_submission_order() -> None:
    a, b, c = (pending(name, 2, submit=t) for name, t in (("a", 1.0), ("b", 2.0), ("c", 3.0)))
    plan = FifoPolicy().schedule(view(ONE_BY_4, (), (c, a, b)))  # view order is not queue order
    assert started(plan) == ["a", "b"]
    assert "free" in (plan.reason("c") or "")


# ----------------------------------------------------------------------------- sjf
def test_sjf_orders_by_expected_gpu_time() -> None:
    wide_short = pending("wide", 4, submit=0.0, expected_duration=100.0)  # 400 GPU-s
    narrow_long = pending("narrow", 1, submit=1.0, expected_duration=300.0)  # 300 GPU-s
    unknown = pending("unknown", 1, submit=-5.0)
    pend = (wide_short, narrow_long, unknown)
    plan = SjfPolicy().schedule(view(ONE_BY_4, (), pend))
    assert started(plan) == ["narrow", "unknown"]  # wide no longer fits; unknown goes last
    plan = SjfPolicy(by_gpu_time=False).schedule(view(ONE_BY_4, (), pend))
    assert started(plan) == ["wide"]
    plan = SjfPolicy(backfill=False).schedule(view(ONE_BY_4, (), pend))
    assert started(plan) == ["narrow"]
    assert "queued behind a job of project default" in (plan.reason("unknown") or "")


# ------------------------------------------------------------------------ priority
def test_priority_higher_first() -> None:
    pend = (pending("lo", 2, submit=0.0, priority=0), pending("hi", 2, submit=10.0, priority=1))
    plan = PriorityPolicy().schedule(view(ONE_BY_2, (), pend, now=20.0))
    assert started(plan) == ["hi"]
    assert waiting(plan, ["lo", "hi"]) == {"lo"}


def test_priority_aging_lets_an_old_job_pass_a_new_one() -> None:
    old = pending("old", 2, submit=0.0, priority=0)  # 0 + 2 h x 1/h = 2
    new = pending("new", 2, submit=7000.0, priority=1)  # 1 + 200 s
    seen = view(ONE_BY_2, (), (new, old), now=7200.0)
    plan = PriorityPolicy(aging_per_hour=1.0, preempt=False).schedule(seen)
    assert started(plan) == ["old"]
    plan = PriorityPolicy(aging_per_hour=0.0, preempt=False).schedule(seen)
    assert started(plan) == ["new"]
    # with preemption "new" would preempt "old" the next round: it starts at once
    assert started(PriorityPolicy(aging_per_hour=1.0).schedule(seen)) == ["new"]


def test_priority_preempts_only_for_strictly_higher_base_priority() -> None:
    low = running("low", [(0, 0), (0, 1)], priority=0)
    urgent = pending("urgent", 2, submit=5.0, priority=1)
    plan = PriorityPolicy().schedule(view(ONE_BY_2, (low,), (urgent,), now=10.0))
    assert preempted(plan) == ["low"] and started(plan) == ["urgent"]
    # an equal-priority job waits, however long it has aged
    aged = pending("aged", 2, submit=0.0, priority=0)
    plan = PriorityPolicy(aging_per_hour=100.0).schedule(
        view(ONE_BY_2, (low,), (aged,), now=10 * 3600.0)
    )
    assert preempted(plan) == [] and started(plan) == [] and waiting(plan, ["aged"]) == {"aged"}
    # preempt=False never preempts
    plan = PriorityPolicy(preempt=False).schedule(view(ONE_BY_2, (low,), (urgent,), now=10.0))
    assert preempted(plan) == [] and started(plan) == []


def test_priority_never_preempts_a_non_preemptible_job() -> None:
    pinned = running("pinned", [(0, 0), (0, 1)], priority=0, preemptible=False)
    urgent = pending("urgent", 2, submit=5.0, priority=9)
    plan = PriorityPolicy().schedule(view(ONE_BY_2, (pinned,), (urgent,), now=10.0))
    assert preempted(plan) == [] and started(plan) == []
    assert "urgent" in waiting(plan, ["urgent"])


def test_priority_preempts_the_lowest_first() -> None:
    a = running("a", [(0, 0)], priority=2)
    b = running("b", [(0, 1)], priority=1)
    c = running("c", [(0, 2), (0, 3)], priority=3)
    urgent = pending("urgent", 1, submit=5.0, priority=5)
    plan = PriorityPolicy().schedule(view(ONE_BY_4, (a, b, c), (urgent,), now=10.0))
    assert preempted(plan) == ["b"] and started(plan) == ["urgent"]
    assert [(s.node, s.gpu) for s in plan.starts[0].allocation.shares] == [(0, 1)]


def _strict_view(fill: bool, duration: float | None = None) -> tuple[ClusterView, tuple[str, ...]]:
    """A 4-GPU job H (priority 5) blocked by a non-preemptible job of its priority on GPUs
    0-1, a low job on GPU 2, and M (priority 3, 1 GPU, queued after H). ``fill``: another
    low job holds GPU 3 (M could start only by preempting one); else GPU 3 is free."""
    pinned = running("X", [(0, 0), (0, 1)], priority=5, preemptible=False, expected_duration=100.0)
    lows = [running("L", [(0, 2)], expected_duration=50.0)]
    if fill:
        lows.append(running("L3", [(0, 3)], expected_duration=50.0))
    high = pending("H", 4, submit=5.0, priority=5)
    mid = pending("M", 1, submit=6.0, priority=3, expected_duration=duration)
    return view(ONE_BY_4, (pinned, *lows), (high, mid), now=10.0), ("H", "M")


@pytest.mark.parametrize("fill", [False, True])
@pytest.mark.parametrize(
    "options", [{"backfill": False}, {"reserve": True}], ids=["strict", "reserve"]
)
def test_priority_preemption_keeps_strict_order_and_reservations(
    fill: bool, options: dict[str, Any]
) -> None:
    """With ``backfill=False`` (strict order) or ``reserve=True`` (EASY backfill, M expected
    to outlast H's reservation), M waits behind the blocked H whether or not the policy may
    preempt: the preemption pass (which outranks L for M) does not backfill past H."""
    seen, ids = _strict_view(fill, duration=1e4)
    calm = PriorityPolicy(preempt=False, **options).schedule(seen)
    plan = PriorityPolicy(**options).schedule(seen)
    assert started(calm) == [] and preempted(calm) == []
    assert started(plan) == [] and preempted(plan) == []
    assert plan.reason("M") == calm.reason("M") and plan.reason("M")
    assert waiting(plan, ids) == {"H", "M"}
    # with greedy backfill M is started, by preemption when no GPU is free
    plan = PriorityPolicy().schedule(seen)
    assert started(plan) == ["M"] and preempted(plan) == (["L3"] if fill else [])


def test_priority_reservation_lets_a_job_that_ends_in_time_through() -> None:
    """A job that ends before H's reservation still starts past it, preemption or not."""
    seen, _ = _strict_view(False, duration=20.0)
    for preempt in (False, True):
        plan = PriorityPolicy(reserve=True, preempt=preempt).schedule(seen)
        assert started(plan) == ["M"] and preempted(plan) == []


def test_priority_strict_order_still_preempts_for_the_head_of_the_queue() -> None:
    """Strict order holds back only what comes after the first job that cannot start: the
    head, which starts by preempting a low job, does; the job after it, which fits on no
    GPU left and outranks nothing, waits."""
    low = running("low", [(0, 0), (0, 1)], priority=0)
    other = running("other", [(0, 2), (0, 3)], priority=1, preemptible=False)
    urgent = pending("urgent", 2, submit=5.0, priority=5)
    later = pending("later", 1, submit=6.0, priority=0)
    plan = PriorityPolicy(backfill=False).schedule(
        view(ONE_BY_4, (low, other), (urgent, later), now=10.0)
    )
    assert started(plan) == ["urgent"] and preempted(plan) == ["low"]
    assert waiting(plan, ["urgent", "later"]) == {"later"}


# ------------------------------------------------------------------------ tiresias
TIRESIAS = TiresiasPolicy(thresholds=(100.0,))


def test_tiresias_demotes_at_the_threshold() -> None:
    job = running("r", [(0, 0), (0, 1)], last_start=10.0)  # 2 GPUs: 100 GPU-s at t = 60
    assert TIRESIAS.queue_of(job, 59.9) == (0, 0.0)
    assert TIRESIAS.queue_of(job, 60.0) == (1, 60.0)  # reaching the threshold demotes
    assert TIRESIAS.queue_of(job, 500.0) == (1, 60.0)  # entered when it crossed
    # service attained in earlier runs counts
    resumed = running("r2", [(0, 0)], last_start=1000.0, attained_service=70.0)
    assert TIRESIAS.queue_of(resumed, 1029.0) == (0, 0.0)
    assert TIRESIAS.queue_of(resumed, 1030.0) == (1, 1030.0)
    # a pending job is placed by its service
    stopped = pending("p", 1, submit=5.0, attained_service=150.0)
    assert TIRESIAS.queue_of(stopped, 2000.0)[0] == 1
    # several thresholds
    multi = TiresiasPolicy(thresholds=(10.0, 100.0))
    one = running("one", [(0, 0)], last_start=0.0)
    assert [multi.queue_of(one, t)[0] for t in (9.0, 10.0, 99.0, 100.0, 1e6)] == [0, 1, 1, 2, 2]


def test_tiresias_new_job_preempts_a_demoted_running_job() -> None:
    old = running("old", [(0, 0), (0, 1)], last_start=0.0)  # demoted at t = 50
    new = pending("new", 2, submit=90.0)
    plan = TIRESIAS.schedule(view(ONE_BY_2, (old,), (new,), now=120.0))
    assert preempted(plan) == ["old"] and started(plan) == ["new"]
    assert plan.marks == {"old": {QUEUE: 1.0, ENTERED: 50.0}}


def test_tiresias_no_preemption_before_the_threshold_and_recheck_at_crossing() -> None:
    old = running("old", [(0, 0), (0, 1)], last_start=0.0)
    new = pending("new", 2, submit=30.0)
    plan = TIRESIAS.schedule(view(ONE_BY_2, (old,), (new,), now=40.0))
    assert preempted(plan) == [] and started(plan) == []
    assert "new" in waiting(plan, ["new"])
    assert plan.recheck_at == pytest.approx(50.0)  # 80 GPU-s now, 2 GPUs, threshold 100
    assert plan.marks == {}
    # at the crossing the plan changes
    plan = TIRESIAS.schedule(view(ONE_BY_2, (old,), (new,), now=50.0))
    assert preempted(plan) == ["old"]


def test_tiresias_recheck_is_infinite_when_nothing_waits() -> None:
    old = running("old", [(0, 0)], last_start=0.0)
    plan = TIRESIAS.schedule(view(ONE_BY_2, (old,), (pending("new", 1),), now=1.0))
    assert started(plan) == ["new"] and plan.recheck_at == math.inf


def test_tiresias_orders_demoted_jobs_by_demotion_time() -> None:
    early = pending("early", 2, submit=0.0, attained_service=500.0, marks={QUEUE: 1, ENTERED: 900})
    late = pending("late", 2, submit=100.0, attained_service=500.0, marks={QUEUE: 1, ENTERED: 300})
    fresh = pending("fresh", 2, submit=950.0)
    plan = TIRESIAS.schedule(view(ONE_BY_2, (), (early, late), now=1000.0))
    assert started(plan) == ["late"]  # demoted first, so first in queue 1
    plan = TIRESIAS.schedule(view(ONE_BY_2, (), (early, late, fresh), now=1000.0))
    assert started(plan) == ["fresh"]  # queue 0 before queue 1


def test_tiresias_skips_a_job_that_does_not_fit() -> None:
    hold = running("hold", [(0, 0), (0, 1), (0, 2)], last_start=0.0)
    big = pending("big", 2, submit=1.0)
    small = pending("small", 1, submit=2.0)
    plan = TIRESIAS.schedule(view(ONE_BY_4, (hold,), (big, small), now=3.0))
    assert started(plan) == ["small"] and preempted(plan) == []


def test_tiresias_rejects_unsorted_thresholds() -> None:
    with pytest.raises(ValueError, match="ascend"):
        TiresiasPolicy(thresholds=(100.0, 10.0))


# ------------------------------------------------------------------- value density
def test_value_density_orders_by_priority_over_remaining_time() -> None:
    vd = ValueDensityPolicy()
    short = pending("short", 1, expected_duration=100.0)
    long_ = pending("long", 1, expected_duration=1000.0)
    one = Cluster.homogeneous(1, 1)
    assert started(vd.schedule(view(one, (), (long_, short)))) == ["short"]
    important = pending("important", 1, expected_duration=1000.0, priority=4)  # 16 / 1000
    assert started(vd.schedule(view(one, (), (short, important)))) == ["important"]
    # density counts GPUs and time already run
    wide = pending("wide", 2, expected_duration=100.0)
    assert vd.density(wide, 0.0) == pytest.approx(1 / 200)
    half = pending("half", 1, expected_duration=100.0, run_time=60.0)
    assert vd.density(half, 0.0) == pytest.approx(1 / 40)


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_value_density_ranks_any_priority_the_spec_allows(scale: float) -> None:
    # 2 ** (p / scale) leaves the range of a float from p = 1024 x scale (OverflowError)
    # and rounds to 0 below about -1075 x scale (every such job tied).
    vd = ValueDensityPolicy(priority_scale=scale)
    one = Cluster.homogeneous(1, 1)
    for p in (1024, 1100, 1_000_000):
        job = pending(f"j{p}", 1, priority=p, expected_duration=10.0)
        assert started(vd.schedule(view(one, (), (job,)))) == [job.id]
    top = pending("top", 1, priority=1_000_000, expected_duration=10.0)
    next_ = pending("next", 1, priority=999_999, expected_duration=10.0)
    assert started(vd.schedule(view(one, (), (next_, top)))) == ["top"]
    # Very low priorities still differ: the shorter job of two at -1500 and -1100 loses
    # to the higher priority, and is preempted for nothing.
    low = running("low", [(0, 0)], priority=-1100, expected_duration=1000.0)
    lower = pending("lower", 1, submit=1.0, priority=-1500, expected_duration=1.0)
    assert vd.log_density(low, 0.0) > vd.log_density(lower, 0.0)
    plan = vd.schedule(view(one, (low,), (lower,)))
    assert preempted(plan) == [] and started(plan) == []
    shorter = pending("shorter", 1, submit=1.0, priority=-1100, expected_duration=1.0)
    plan = vd.schedule(view(one, (low,), (shorter,)))
    assert preempted(plan) == ["low"] and started(plan) == ["shorter"]


def test_value_density_preempts_a_much_less_valuable_job() -> None:
    one = Cluster.homogeneous(1, 1)
    slow = running("slow", [(0, 0)], expected_duration=10_000.0)
    quick = pending("quick", 1, expected_duration=10.0)
    plan = ValueDensityPolicy().schedule(view(one, (slow,), (quick,)))
    assert preempted(plan) == ["slow"] and started(plan) == ["quick"]


def test_value_density_hysteresis_prevents_swapping_similar_jobs() -> None:
    one = Cluster.homogeneous(1, 1)
    runner = running("runner", [(0, 0)], expected_duration=120.0)  # 120 s left, 90 with credit
    rival = pending("rival", 1, expected_duration=100.0)
    plan = ValueDensityPolicy(restart_cost=30.0).schedule(view(one, (runner,), (rival,)))
    assert preempted(plan) == [] and started(plan) == []
    # without the restart credit the two would swap ...
    plan = ValueDensityPolicy(restart_cost=0.0).schedule(view(one, (runner,), (rival,)))
    assert preempted(plan) == ["runner"] and started(plan) == ["rival"]
    # ... and with it, once swapped, they do not swap back
    swapped = running("rival", [(0, 0)], expected_duration=100.0)
    back = pending("runner", 1, expected_duration=120.0)
    plan = ValueDensityPolicy(restart_cost=30.0).schedule(view(one, (swapped,), (back,)))
    assert preempted(plan) == []


def test_value_density_keeps_waiting_ranks_and_plans_as_a_new_policy_does() -> None:
    """One policy object over successive rounds (pending statuses kept, jobs started,
    preempted and arriving) plans what a new object plans each round, and keeps the jobs
    still waiting, and only those, in rank order."""
    rng = random.Random(5)
    cluster = Cluster.homogeneous(2, 4)
    kept = ValueDensityPolicy()
    waiting = [
        pending(f"p{i}", rng.choice([1, 2]), float(i), expected_duration=rng.uniform(50, 500))
        for i in range(12)
    ]
    run: list[JobStatus] = []
    preemptions = 0
    for step in range(12):
        now = 60.0 * step
        current = view(cluster, tuple(run), tuple(waiting), now)
        plan = kept.schedule(current)
        assert plan == ValueDensityPolicy().schedule(current)
        order = kept._pending
        assert [j.id for j in order.jobs] == [
            j.id for j in sorted(waiting, key=lambda j: kept.rank_key(j, now)[0])
        ]
        for status, key in zip(order.jobs, order.keys, strict=True):
            assert key == (-kept.log_density(status, now), status.request.submit_time, status.id)
        gone = set(preempted(plan))
        preemptions += len(gone)
        starts = {s.job_id: s.allocation for s in plan.starts}
        still = [j for j in run if j.id not in gone]
        back = [
            dataclasses.replace(
                j, allocation=Allocation(), last_start=None, run_time=j.run_time_at(now)
            )
            for j in run
            if j.id in gone
        ]
        started_now = [
            dataclasses.replace(j, allocation=starts[j.id], last_start=now)
            for j in waiting
            if j.id in starts
        ]
        waiting = [j for j in waiting if j.id not in starts] + back
        if waiting and step % 3 == 1:  # a waiting job's priority changed: a new status
            i = rng.randrange(len(waiting))
            job = waiting[i]
            raised = dataclasses.replace(job.request, priority=job.request.priority + 3)
            waiting[i] = dataclasses.replace(job, request=raised)
        short = rng.uniform(5, 40)  # worth preempting for
        waiting.append(pending(f"n{step}", 1, now, expected_duration=short, priority=2))
        run = still + started_now
    assert run and waiting and preemptions


# ---------------------------------------------------------------- all the policies
POLICIES = (
    FifoPolicy(),
    FifoPolicy(backfill=True, placement="first-fit"),
    FifoPolicy(backfill=True, reserve=True),
    SjfPolicy(),
    SjfPolicy(reserve=True, placement="spread"),
    PriorityPolicy(),
    PriorityPolicy(reserve=True),
    PriorityPolicy(backfill=False),
    FairSharePolicy(),
    FairSharePolicy(backfill=False, placement="spread"),
    PriorityPolicy(placement="topology"),
    TiresiasPolicy(thresholds=(200.0,)),
    TiresiasPolicy(thresholds=(50.0, 500.0), placement="spread"),
    ValueDensityPolicy(),
)
GPU_KINDS = (GpuType("small", 16 * GiB), GpuType("big", 80 * GiB))


@st.composite
def views(draw: st.DrawFn) -> ClusterView:
    nodes = tuple(
        Node(
            f"n{i}",
            draw(st.integers(1, 4)),
            draw(st.sampled_from(GPU_KINDS)),
            rack=f"rack-{i % 2}",
        )
        for i in range(draw(st.integers(1, 4)))
    )
    cluster = Cluster(nodes)
    now = 1000.0
    free = FreeMap(ClusterView(now, cluster))
    run: list[JobStatus] = []
    pend: list[JobStatus] = []
    for i in range(draw(st.integers(0, 10))):
        shared = draw(st.booleans()) and draw(st.booleans())
        req = JobRequest(
            id=f"j{i}",
            submit_time=draw(st.floats(0.0, now)),
            gpus=1 if shared else draw(st.integers(1, 6)),
            priority=draw(st.integers(0, 2)),
            gpu_memory=draw(st.integers(1, 20)) * GiB if shared else 0,
            gpu_types=draw(st.sampled_from([frozenset(), frozenset({"big"})])),
            preemptible=draw(st.booleans()) or draw(st.booleans()),
            expected_duration=draw(st.one_of(st.none(), st.floats(10.0, 5000.0))),
            seq=i,
        )
        alloc = free.place(req) if draw(st.booleans()) else None
        service = draw(st.floats(0.0, 600.0))
        if alloc is not None:
            start = draw(st.floats(req.submit_time, now))
            run.append(JobStatus(req, alloc, attained_service=service, last_start=start))
        else:
            pend.append(JobStatus(req, attained_service=service, run_time=service / req.gpus))
    return ClusterView(now, cluster, running=tuple(run), pending=tuple(pend))


def check_plan(v: ClusterView, plan: Plan) -> None:
    pending_ids = {j.id for j in v.pending}
    running_by_id = {j.id: j for j in v.running}
    starts = started(plan)
    assert len(set(starts)) == len(starts) and set(starts) <= pending_ids
    assert set(starts).isdisjoint(plan.waiting)
    left = pending_ids - set(starts)
    assert waiting(plan, left) == left  # every pending job is started or told why it waits
    for job_id in preempted(plan):
        assert running_by_id[job_id].request.preemptible
    assert len(set(preempted(plan))) == len(plan.preempts)
    free = FreeMap(v)
    for job_id in preempted(plan):
        free.release(running_by_id[job_id].allocation)
    requests = {j.id: j.request for j in v.pending}
    for start in plan.starts:
        req = requests[start.job_id]
        if not req.shares_gpu:
            assert len(start.allocation.shares) == req.gpus == start.allocation.num_gpus
        if req.gpu_types:
            for share in start.allocation.shares:
                assert v.cluster.nodes[share.node].gpu_type.name in req.gpu_types
        free.take(start.allocation)  # raises PlacementError on over-allocation
    assert (free.free_milli >= 0).all() and (free.free_memory >= 0).all()


@settings(max_examples=60, deadline=None)
@given(views())
def test_plans_never_over_allocate_and_are_deterministic(v: ClusterView) -> None:
    for policy in POLICIES:
        plan = policy.schedule(v)
        check_plan(v, plan)
        assert policy.schedule(v) == plan  # same view, same plan (memo or not)
        assert dataclasses.replace(policy).schedule(v) == plan  # a fresh instance agrees


@settings(max_examples=60, deadline=None)
@given(views(), st.data())
def test_plans_never_hand_out_the_gpus_of_draining_jobs_twice(
    v: ClusterView, data: st.DataObject
) -> None:
    """Some running jobs drain (told to stop, still on their GPUs): no plan preempts them
    again, and no two jobs' work lands on one GPU once they have exited (the starts that
    wait for their GPUs included)."""
    chosen = data.draw(st.sets(st.sampled_from([j.id for j in v.running]))) if v.running else set()
    v = dataclasses.replace(v, draining=frozenset(chosen))
    for policy in POLICIES:
        plan = policy.schedule(v)
        assert not {p.job_id for p in plan.preempts} & v.draining
        free = FreeMap(dataclasses.replace(v, running=(), used_milli=None, used_memory=None))
        gone = v.draining | {p.job_id for p in plan.preempts}
        for job in v.running:
            if job.id not in gone:
                free.take(job.allocation)
        for start in plan.starts:
            free.take(start.allocation)  # raises PlacementError on over-allocation


def test_check_plan_catches_over_allocation() -> None:
    hold = running("hold", [(0, 0)])
    bad = Plan(starts=(*FifoPolicy().schedule(view(ONE_BY_2, (), (pending("x"),))).starts,))
    with pytest.raises(PlacementError):
        check_plan(view(ONE_BY_2, (hold,), (pending("x"),)), bad)


# ------------------------------------------------------------------------ registry
def test_registry_builds_policies_with_options() -> None:
    assert {"fifo", "priority", "sjf", "tiresias", "value-density"} <= set(
        default_registry().names()
    )
    policy = make_policy("tiresias", thresholds=(3600.0,), placement="best-fit")
    assert isinstance(policy, TiresiasPolicy)
    assert policy.thresholds == (3600.0,) and policy.name == "tiresias"
    assert make_policy("fifo", backfill=True) == FifoPolicy(backfill=True)


def test_registry_unknown_name_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        make_policy("drf")
    for name in default_registry().names():
        assert name in str(info.value)


@pytest.mark.parametrize("option", ["bogus", "_memo"])
def test_registry_rejects_unknown_options(option: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_policy("tiresias", **{option: 1})
    message = str(info.value)
    assert repr(option) in message
    assert "thresholds" in message and "placement" in message
    assert "_memo" not in message.split("options:")[1]


def test_registry_rejects_unknown_placement() -> None:
    with pytest.raises(UnknownNameError) as info:
        make_policy("fifo", placement="tightest")
    assert all(s in str(info.value) for s in STRATEGIES)


def test_registry_instances_are_independent() -> None:
    mine = PolicyRegistry()
    mine.register("mine", FifoPolicy)
    with pytest.raises(ConfigError, match="already registered"):
        mine.register("mine", SjfPolicy)
    assert "mine" not in default_registry().names()
    assert mine.create("mine") == FifoPolicy()


def _draining(gpus: list[int], **kw: Any) -> tuple[JobStatus, ...]:
    """Jobs told to stop, still checkpointing on ``gpus`` of node 0 (not preemptible)."""
    return tuple(running(f"d{g}", [(0, g)], preemptible=False, **kw) for g in gpus)


@pytest.mark.parametrize("policy", [TiresiasPolicy(), ValueDensityPolicy()])
def test_a_job_waiting_for_draining_gpus_keeps_the_free_part(policy: Any) -> None:
    """A 4-GPU job that fits only once the jobs draining GPUs 0, 2 and 3 exit starts there
    (it waits for them) and GPU 1, free now, is not given to a job ranked after it: given,
    it would be preempted once the drain ends, and the two would take turns for good."""
    cluster = Cluster.homogeneous(1, 4)
    drainers = _draining([0, 2, 3], submit=5.0)
    big = pending("big", gpus=4, submit=1.0, expected_duration=10.0)  # ranked first by both
    small = pending("small", submit=2.0, expected_duration=1000.0)
    seen = ClusterView(0.0, cluster, drainers, (big, small), draining=frozenset(["d0", "d2", "d3"]))
    plan = policy.schedule(seen)
    assert [(s.job_id, sorted(g.gpu for g in s.allocation.shares)) for s in plan.starts] == [
        ("big", [0, 1, 2, 3])
    ]
    assert not plan.preempts and plan.reason("small")
    # had the drainers been jobs that stay, the free GPU goes to the small job
    plan = policy.schedule(dataclasses.replace(seen, draining=frozenset()))
    assert [s.job_id for s in plan.starts] == ["small"]
    # a job ranked after it that holds the free GPU is preempted for it at once
    low = running("low", [(0, 1)], submit=3.0, expected_duration=1e6, last_start=-10.0)
    seen = ClusterView(0.0, cluster, (*drainers, low), (big,), draining=seen.draining)
    plan = policy.schedule(seen)
    assert [s.job_id for s in plan.starts] == ["big"]
    assert [p.job_id for p in plan.preempts] == ["low"]
