"""Rank orders kept across rounds (RankedJobs) and the bulk admission of ranked_round.

The cache must be transparent: a policy that saw earlier rounds plans exactly as a fresh one.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.cluster import GPU_TYPES, MILLI_PER_GPU, Allocation, Cluster, Node
from danlu.sched.placement.gang import FreeMap
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.policies.ranked import RankedJobs, RankKey, seq_diff
from danlu.sched.policies.ranked_round import _preempting_round, ranked_round
from danlu.sched.policies.sjf import SjfPolicy
from danlu.sched.policies.tiresias import TiresiasPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan


def _status(seq: int, rng: random.Random, now: float) -> JobStatus:
    return JobStatus(
        request=JobRequest(
            id=f"j{seq}",
            submit_time=now - rng.uniform(0, 5000),
            gpus=rng.choice([1, 1, 2, 4, 8]),
            priority=rng.choice([0, 0, 1, 2]),
            seq=seq,
            expected_duration=rng.choice([None, rng.uniform(60, 9000)]),
            preemptible=rng.random() > 0.1,
        ),
        attained_service=rng.choice([0.0, rng.uniform(0, 20_000)]),
        run_time=rng.uniform(0, 3000),
    )


def _first_view(rng: random.Random, nodes: int, pending: int, running: int) -> ClusterView:
    cluster = Cluster.homogeneous(nodes, 8, nodes_per_rack=8)
    now = 10_000.0
    free = FreeMap(ClusterView(time=0.0, cluster=cluster), "first-fit")
    jobs = [_status(i, rng, now) for i in range(pending + running)]
    run: list[JobStatus] = []
    for job in jobs[:running]:
        alloc = free.place(job.request)
        if alloc is not None:
            run.append(replace(job, allocation=alloc, last_start=now - rng.uniform(0, 3000)))
    return ClusterView(time=now, cluster=cluster, running=tuple(run), pending=tuple(jobs[running:]))


def _next_view(view: ClusterView, plan: Plan, rng: random.Random, churn: int) -> ClusterView:
    """Apply ``plan``, advance 300 s, finish ``churn`` running jobs, submit ``churn`` new."""
    now = view.time + 300.0
    started = {s.job_id: s.allocation for s in plan.starts}
    stopped = {p.job_id for p in plan.preempts}
    done = set(rng.sample([j.id for j in view.running], min(churn, len(view.running))))
    running = [j for j in view.running if j.id not in stopped | done]
    running += [
        replace(j, allocation=started[j.id], last_start=view.time)
        for j in view.pending
        if j.id in started
    ]
    pending = [j for j in view.pending if j.id not in started]
    for job in view.running:
        if job.id in stopped:
            service = job.attained_at(view.time)
            marks = {**job.marks, **plan.marks.get(job.id, {})}
            stop = replace(job, allocation=Allocation(), last_start=job.last_start)
            pending.append(replace(stop, attained_service=service, marks=marks))
    top = 1 + max(j.request.seq for j in (*view.running, *view.pending))
    pending += [_status(top + i, rng, now) for i in range(churn)]
    # Some statuses change without the job moving (a new object for the same job).
    pending = [replace(j, marks={"note": 1.0}) if rng.random() < 0.01 else j for j in pending]
    pending.sort(key=lambda j: j.request.seq)
    rng.shuffle(running)  # running jobs come in no particular order
    return ClusterView(
        time=now, cluster=view.cluster, running=tuple(running), pending=tuple(pending)
    )


POLICIES = {
    "tiresias": lambda: TiresiasPolicy(thresholds=(3600.0, 14_400.0)),
    "tiresias-starve": lambda: TiresiasPolicy(
        thresholds=(3600.0,), starvation_factor=1.0, starvation_min=600.0
    ),
    "priority": lambda: PriorityPolicy(),
    "sjf": lambda: SjfPolicy(),
    "danlu": lambda: DanluPolicy(),
}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_policy_that_saw_earlier_rounds_plans_like_a_fresh_one(name: str) -> None:
    rng = random.Random(7)
    view = _first_view(rng, nodes=24, pending=400, running=150)
    warm = POLICIES[name]()
    moves = 0
    for _ in range(25):
        plan = warm.schedule(view)
        fresh = POLICIES[name]().schedule(view)
        assert plan == fresh
        moves += len(plan.starts) + len(plan.preempts)
        view = _next_view(view, plan, rng, churn=rng.choice([0, 3, 40]))
    assert moves > 0  # the rounds did something


def _key(job: JobStatus, now: float) -> tuple[RankKey, float]:
    # Changes at a known instant: the job's queue flips once the clock passes its seq x 10.
    flip = job.request.seq * 10.0
    queue = 0 if now < flip else 1
    return (queue, -job.request.gpus, job.request.seq), flip if now < flip else math.inf


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.booleans())
def test_ranked_jobs_match_a_sort_from_scratch(seed: int, by_seq: bool) -> None:
    rng = random.Random(seed)
    ranked = RankedJobs(by_seq=by_seq)
    jobs = [_status(i, rng, 0.0) for i in range(rng.randint(0, 300))]
    next_seq = len(jobs)
    now = 0.0
    for _ in range(12):
        ranked.update(tuple(jobs), now, _key)
        expected = sorted(jobs, key=lambda j: _key(j, now)[0])
        assert ranked.jobs == expected
        assert ranked.keys == [_key(j, now)[0] for j in expected]
        # Leave, come, change; time moves on (sometimes back).
        for _ in range(rng.choice([0, 1, 5, 80])):
            if jobs and rng.random() < 0.5:
                jobs.pop(rng.randrange(len(jobs)))
            elif jobs and rng.random() < 0.5:
                i = rng.randrange(len(jobs))
                jobs[i] = replace(jobs[i], run_time=jobs[i].run_time + 1)
            else:
                jobs.append(_status(next_seq, rng, 0.0))
                next_seq += 1
        jobs.sort(key=lambda j: j.request.seq)
        if rng.random() < 0.1:  # an adapter that builds every status anew
            jobs = [replace(j) for j in jobs]
        now += rng.choice([0.0, 5.0, 400.0, -50.0])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=200), st.integers(0, 10**6))
def test_seq_diff_finds_exactly_what_changed(ops: list[int], seed: int) -> None:
    rng = random.Random(seed)
    old = [_status(i, rng, 0.0) for i in range(0, 2 * len(ops) + 5, 2)]
    new = list(old)
    for op in ops:  # 0 keep, 1 remove, 2 insert, 3 replace by an equal-looking new status
        if not new:
            break
        i = rng.randrange(len(new))
        if op == 1:
            new.pop(i)
        elif op == 2:
            new.insert(i, _status(new[i].request.seq - 1, rng, 0.0))
        elif op == 3:
            new[i] = replace(new[i], progress=0.5)
    new = sorted({j.request.seq: j for j in new}.values(), key=lambda j: j.request.seq)
    gone, came = seq_diff(tuple(old), tuple(new))
    assert {id(j) for j in gone} == {id(j) for j in old} - {id(j) for j in new}
    assert {id(j) for j in came} == {id(j) for j in new} - {id(j) for j in old}


def test_bulk_admission_draws_the_same_line_as_one_job_at_a_time() -> None:
    rng = random.Random(3)
    for _ in range(30):
        view = _first_view(rng, nodes=10, pending=rng.randint(1, 120), running=rng.randint(0, 60))
        keyed = [((rng.random(), j.request.seq), j) for j in (*view.pending, *view.running)]
        pend = sorted((kj for kj in keyed if not kj[1].running), key=lambda kj: kj[0])
        run = sorted((kj for kj in keyed if kj[1].running), key=lambda kj: kj[0])
        plan = ranked_round(
            view,
            [k for k, _ in pend],
            [j for _, j in pend],
            lambda run=run: ([k for k, _ in run], [j for _, j in run]),  # type: ignore[misc]
            "best-fit",
        )
        # Reference: admit in rank order while the demand fits the capacity left.
        budget = view.cluster.total_gpus * MILLI_PER_GPU
        budget -= sum(j.demand_milli for j in view.running if not j.request.preemptible)
        admitted: set[str] = set()
        below: set[str] = set()
        for _, job in sorted(pend + [kj for kj in run if kj[1].request.preemptible]):
            if budget > 0 and job.demand_milli <= budget:
                admitted.add(job.id)
                budget -= job.demand_milli
            elif job.running:
                below.add(job.id)
        assert {p.job_id for p in plan.preempts} <= below
        if plan.preempts:  # the slow path ran: nothing outside the line starts
            assert {s.job_id for s in plan.starts} <= admitted
        # The slow path itself, run directly: exactly the pending jobs above the line may
        # start; those below wait as outranked, those above wait only for placement.
        slow = _preempting_round(
            FreeMap(view, "best-fit"),
            view,
            [k for k, _ in pend],
            [j for _, j in pend],
            [k for k, _ in run],
            [j for _, j in run],
            None,
        )
        started = {s.job_id for s in slow.starts}
        assert started <= admitted
        assert {p.job_id for p in slow.preempts} <= below
        for _, job in pend:
            reason = slow.waiting.get(job.id, slow.waiting_default)
            if job.id not in admitted:
                assert reason.startswith("outranked"), (job.id, reason)
            elif job.id not in started:
                assert not reason.startswith("outranked"), (job.id, reason)


def _gpus(alloc: Allocation) -> set[tuple[int, int]]:
    return {(share.node, share.gpu) for share in alloc.shares}


def test_an_unplaceable_top_job_preempts_nobody_for_a_lower_ranked_one() -> None:
    # The priority-10 job needs H100s, all held by a non-preemptible job: it can never be
    # placed. It used to take the budget anyway, push the priority-5 job below the line and
    # hand that job's A100s to the priority-1 job.
    a100, h100 = GPU_TYPES["A100-80GB"], GPU_TYPES["H100"]
    cluster = Cluster((Node("a", 4, a100), Node("h", 2, h100)))
    seq = iter(range(10))

    def job(job_id: str, gpus: int, priority: int, **kw: object) -> JobRequest:
        return JobRequest(job_id, 0.0, gpus, priority=priority, seq=next(seq), **kw)  # type: ignore[arg-type]

    z = JobStatus(job("Z", 4, 5), Allocation.whole_gpus([(0, g) for g in range(4)]), last_start=0.0)
    w = JobStatus(
        job("W", 2, 0, preemptible=False), Allocation.whole_gpus([(1, 0), (1, 1)]), last_start=0.0
    )
    x = JobStatus(job("X", 2, 10, gpu_types=frozenset({"H100"})))
    y = JobStatus(job("Y", 2, 1))
    plan = PriorityPolicy().schedule(ClusterView(100.0, cluster, running=(z, w), pending=(x, y)))
    assert plan.starts == () and plan.preempts == ()
    assert plan.reason("Y") is not None and plan.reason("Y").startswith("outranked")  # type: ignore[union-attr]
    assert plan.reason("X") == "needs 2 GPUs of type H100, 0 free"


def test_a_victim_is_preempted_only_for_a_job_ranked_above_it() -> None:
    # Mixed GPU types and type-bound jobs: placement often disagrees with the budget.
    rng = random.Random(11)
    a100, h100 = GPU_TYPES["A100-80GB"], GPU_TYPES["H100"]
    for _ in range(60):
        nodes = tuple(
            Node(f"n{i}", rng.choice([2, 4, 8]), rng.choice([a100, h100])) for i in range(4)
        )
        cluster = Cluster(nodes)
        free = FreeMap(ClusterView(time=0.0, cluster=cluster), "first-fit")
        jobs: list[JobStatus] = []
        for seq in range(rng.randint(2, 16)):
            types = rng.choice([None, frozenset({"H100"}), frozenset({"A100-80GB"})])
            status = JobStatus(
                JobRequest(
                    f"j{seq}",
                    0.0,
                    rng.choice([1, 2, 4]),
                    seq=seq,
                    gpu_types=types or frozenset(),
                    preemptible=rng.random() > 0.1,
                )
            )
            alloc = free.place(status.request) if rng.random() < 0.6 else None
            jobs.append(replace(status, allocation=alloc, last_start=0.0) if alloc else status)
        view = ClusterView(
            time=10.0,
            cluster=cluster,
            running=tuple(j for j in jobs if j.running),
            pending=tuple(j for j in jobs if not j.running),
        )
        keys = {j.id: (rng.random(), j.request.seq) for j in jobs}
        pend = sorted(view.pending, key=lambda j: keys[j.id])
        run = sorted(view.running, key=lambda j: keys[j.id])
        plan = ranked_round(
            view,
            [keys[j.id] for j in pend],
            pend,
            lambda run=run, keys=keys: ([keys[j.id] for j in run], run),  # type: ignore[misc]
            "best-fit",
        )
        by_id = {j.id: j for j in jobs}
        for preempt in plan.preempts:
            victim = by_id[preempt.job_id]
            over = [s for s in plan.starts if _gpus(s.allocation) & _gpus(victim.allocation)]
            assert any(keys[s.job_id] < keys[victim.id] for s in over), (preempt, plan.starts)
