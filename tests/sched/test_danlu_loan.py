"""The ``loan_rule`` of the danlu policy: a job keeps the lengths of its own past loans (GPUs
it grew into, taken back later) in its marks, and a held job grows only where the time
saved over such a loan repays the two restarts."""

from __future__ import annotations

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies import danlu_loan as dl
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.danlu_alloc import Option
from danlu.sched.policies.danlu_place import GREW_FROM, MOVES
from danlu.sched.view import ClusterView, JobRequest, JobStatus

LIMITS = {"init_batch": 128.0, "max_batch": 4096.0, "min_local_bsz": 32.0, "max_local_bsz": 256.0}
SEEN = {
    **LIMITS,
    "target_batch": 1024.0,
    "progress": 0.1,
    "step_time": 0.40,
    "sync_time": 0.02,
    "local_bsz": 256.0,
    "accum_steps": 0.0,
    "batch_size": 1024.0,
    "num_replicas": 4.0,
    "num_nodes": 1.0,
    "grad_sqr": 1.0,
    "grad_var": 500.0,
    "adaptive": 1.0,
}


def test_repays_needs_the_saving_over_the_loan_to_cover_two_restarts() -> None:
    # 1,000 s left, 500 s on the bigger size (+30 s restart): r = 2
    assert dl.repays(1000.0, 530.0, 90.0, 30.0)  # 60 s at twice the speed save 60 s = 2 R
    assert not dl.repays(1000.0, 530.0, 89.0, 30.0)
    assert not dl.repays(1000.0, 530.0, 90.0, 30.0, margin=1.5)
    assert not dl.repays(1000.0, 1030.0, 1e9, 30.0)  # not faster at all
    # a loan longer than the job: only what the job still needs counts (500 s at r = 2)
    assert dl.repays(1000.0, 530.0, 1e9, 30.0, margin=499.0 / 60.0)
    assert not dl.repays(1000.0, 530.0, 1e9, 30.0, margin=501.0 / 60.0)


def test_loan_marks_keep_a_weighted_mean_of_the_lengths() -> None:
    note: dict[str, float] = {}
    dl.record({}, 100.0, True, 0.5, note)
    assert note == {dl.LENT_AT: 100.0}
    first: dict[str, float] = {}
    dl.record(note, 400.0, False, 0.5, first)  # a shrink ends it: 300 s
    assert first == {dl.LOAN: 300.0, dl.LOANS: 1.0, dl.LENT_AT: 0.0}
    assert dl.loan_time(first) == 300.0
    assert dl.loan_time(first, min_loans=2) is None
    second: dict[str, float] = {}
    dl.record({**first, dl.LENT_AT: 1000.0}, 1100.0, False, 0.25, second)
    assert second[dl.LOAN] == pytest.approx(0.25 * 100.0 + 0.75 * 300.0)
    assert second[dl.LOANS] == 2.0
    nothing: dict[str, float] = {}
    dl.record(first, 2000.0, False, 0.5, nothing)  # no loan open: nothing to end
    assert not nothing and dl.loan_time({}) is None


def test_drop_unpaid_keeps_smaller_sizes_and_paid_growth() -> None:
    opts = [
        Option(2, 1500.0),
        Option(4, 1000.0, keep=True),
        Option(8, 530.0),  # r = 2
        Option(12, 930.0),  # r = 1.11
    ]
    kept = dl.drop_unpaid(opts, 4, 200.0, 30.0)  # 170 s: saves 170 and 19 s
    assert [o.gpus for o in kept] == [2, 4, 8]
    assert dl.worth_lending(opts[2:], 1000.0, 200.0, 30.0) == [opts[2]]
    assert dl.drop_unpaid([o for o in opts if not o.keep], 4, 1.0, 30.0) == [
        o for o in opts if not o.keep
    ]  # no keep option: nothing to compare with


def held_job(extra: dict[str, float]) -> JobStatus:
    """On 4 of 8 GPUs since t = 0, held at t = 200 (one move) and past ``grow_after``."""
    marks = {**dm.remembered({}, SEEN), MOVES: 1.0, "danlu.work": 1e5, **extra}
    alloc = Allocation.whole_gpus([(0, g) for g in range(4)])
    request = JobRequest(id="j", submit_time=0.0, gpus=4, seq=0)
    return JobStatus(request=request, allocation=alloc, last_start=0.0, observed=SEEN, marks=marks)


def grows(policy: DanluPolicy, extra: dict[str, float]) -> list[tuple[str, int]]:
    view = ClusterView(
        time=200.0, cluster=Cluster.homogeneous(2, 4), running=(held_job(extra),), pending=()
    )
    return [(r.job_id, r.allocation.num_gpus) for r in policy.schedule(view).resizes]


def test_a_held_job_with_short_loans_does_not_grow() -> None:
    assert grows(DanluPolicy(), {}) == [("j", 8)]  # the idle node is lent to it
    short = {dl.LOAN: 40.0, dl.LOANS: 1.0}
    assert grows(DanluPolicy(), short) == [("j", 8)]  # off by default
    assert grows(DanluPolicy(loan_rule=True), short) == []  # 10 s at ~2 x cannot repay 60 s
    assert grows(DanluPolicy(loan_rule=True), {dl.LOAN: 1e5, dl.LOANS: 1.0}) == [("j", 8)]
    assert grows(DanluPolicy(loan_rule=True), {}) == [("j", 8)]  # no history yet


def test_the_policy_opens_and_ends_loans_in_the_marks() -> None:
    view = ClusterView(time=200.0, cluster=Cluster.homogeneous(2, 4), running=(held_job({}),))
    plan = DanluPolicy(loan_rule=True).schedule(view)
    assert plan.marks["j"][dl.LENT_AT] == 200.0 and plan.marks["j"][GREW_FROM] == 4.0
    assert dl.LENT_AT not in DanluPolicy().schedule(view).marks["j"]  # off: no loan marks
    # grown to 8 at t = 50, held; an arrival takes the lent node back at t = 200
    marks = {**dm.remembered({}, {**SEEN, "num_replicas": 8.0, "num_nodes": 2.0})}
    marks.update({MOVES: 1.0, GREW_FROM: 4.0, dl.LENT_AT: 50.0})
    seen = {**SEEN, "num_replicas": 8.0, "num_nodes": 2.0, "step_time": 0.2, "sync_time": 0.05}
    alloc = Allocation.whole_gpus([(n, g) for n in range(2) for g in range(4)])
    big = JobStatus(
        request=JobRequest(id="big", submit_time=0.0, gpus=4, seq=0),
        allocation=alloc,
        last_start=0.0,
        observed=seen,
        marks=marks,
    )
    small = JobStatus(
        request=JobRequest(id="small", submit_time=100.0, gpus=4, seq=1, expected_duration=60.0)
    )
    view = ClusterView(
        time=200.0, cluster=Cluster.homogeneous(2, 4), running=(big,), pending=(small,)
    )
    plan = DanluPolicy(loan_rule=True).schedule(view)
    assert [(r.job_id, r.allocation.num_gpus) for r in plan.resizes] == [("big", 4)]
    assert plan.marks["big"][dl.LOAN] == 150.0 and plan.marks["big"][dl.LOANS] == 1.0
    assert plan.marks["big"][dl.LENT_AT] == 0.0
