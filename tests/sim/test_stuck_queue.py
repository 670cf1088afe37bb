"""The engine's end-of-run rule: once nothing runs and nothing can start, only the jobs that
hold the queue up fail, and the jobs behind them run.

It failed every pending job as "could not be placed even on an idle cluster", including
the jobs a strict queue held behind one job that could never start: a replayed trace lost
jobs that fit the idle cluster."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from danlu.core.cluster import GPU_TYPES, Cluster, GiB, Node
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, Plan
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profile
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.stuck import MOST_PROBES
from danlu.sim.workload import ProfiledWork, RigidWork, Workload, WorkloadJob

NCF = Path(__file__).resolve().parents[2] / "../shared/data/pollux/traces/ncf"
CANNOT_PLACE = "could not be placed even on an idle cluster"


def rigid(name: str, submit: float, seq: int, duration: float = 100.0) -> WorkloadJob:
    request = JobRequest(id=name, submit_time=submit, seq=seq, expected_duration=duration)
    return WorkloadJob(request, RigidWork(duration))


def simulate(jobs: list[WorkloadJob], policy: object, **config: object) -> SimResult:
    workload = Workload("w", "danlu", tuple(jobs))
    settings = SimConfig(**config)  # type: ignore[arg-type]
    return Simulator(Cluster.homogeneous(1, 2), policy, workload, settings).run()  # type: ignore[arg-type]


@dataclass(frozen=True)
class _StrictSizing:
    """Strict fifo (no backfill) that says it sizes jobs: a profiled job that no set of
    GPUs could hold at its request is let in, and it heads the queue."""

    name: str = "sizing-fifo"
    sizes_jobs = True

    def schedule(self, view: ClusterView) -> Plan:
        return make_policy("fifo").schedule(view)


@pytest.mark.skipif(not NCF.is_dir(), reason=f"Pollux ncf traces not found at {NCF.resolve()}")
def test_a_job_no_idle_gpus_can_hold_fails_alone_and_the_jobs_behind_it_run() -> None:
    # 4 GPUs of 40 GiB each: the cluster has 2 such GPUs (and 4 of 16 GiB): let in, as a
    # policy that sizes jobs may run it on fewer, but this one runs it at its request
    big = Node("big", 2, GPU_TYPES["A100-80GB"])
    small = Node("small", 4, GPU_TYPES["T4"])
    cluster = Cluster((big, small))
    wide = JobRequest(id="wide", submit_time=0.0, gpus=4, gpu_memory=40 * GiB, seq=0)
    jobs = (WorkloadJob(wide, ProfiledWork("ncf", 256)), rigid("a", 10.0, 1), rigid("b", 20.0, 2))
    workload = Workload("w", "pollux", jobs)
    profiles = {"ncf": load_profile(NCF)}
    result = Simulator(cluster, _StrictSizing(), workload, SimConfig(), profiles).run()
    assert result.rejected == [("wide", CANNOT_PLACE)]
    assert sorted(record.id for record in result.jobs) == ["a", "b"]
    assert not result.unfinished


@dataclass
class _NeverStarts:
    """Strict fifo that never starts the jobs named in ``refused`` (as a policy that sizes
    jobs may never start a profiled one): each holds the queue behind it, on an idle
    cluster it could use."""

    refused: frozenset[str]
    name: str = "never-starts"
    rounds: int = 0
    started: list[str] = field(default_factory=list)

    def schedule(self, view: ClusterView) -> Plan:
        self.rounds += 1
        for position, job in enumerate(view.pending):
            if job.id in self.refused:
                before = replace(view, pending=view.pending[:position])
                plan = make_policy("fifo").schedule(before)
                break
        else:
            plan = make_policy("fifo").schedule(view)
        self.started.extend(start.job_id for start in plan.starts)
        return replace(plan, recheck_at=math.inf)


def test_a_head_the_policy_never_starts_fails_alone_and_the_jobs_behind_it_run() -> None:
    jobs = [rigid("p", 0.0, 0), rigid("a", 10.0, 1), rigid("b", 20.0, 2)]
    policy = _NeverStarts(frozenset({"p"}))
    result = simulate(jobs, policy)
    assert [name for name, _ in result.rejected] == ["p"]
    assert result.rejected[0][1].startswith(CANNOT_PLACE)
    assert sorted(record.id for record in result.jobs) == ["a", "b"]
    # both start at the round after p failed (the stuck point at the first round, 60 s)
    assert {record.id: record.start_time for record in result.jobs} == {"a": 120.0, "b": 120.0}


def test_each_head_that_holds_the_queue_after_a_start_fails_alone() -> None:
    jobs = [rigid("p1", 0.0, 0), rigid("a", 10.0, 1), rigid("p2", 20.0, 2), rigid("b", 30.0, 3)]
    result = simulate(jobs, _NeverStarts(frozenset({"p1", "p2"})))
    assert [name for name, _ in result.rejected] == ["p1", "p2"]
    assert sorted(record.id for record in result.jobs) == ["a", "b"]


@dataclass
class _StartsNothing:
    """Starts nothing, ever; its plan says when it may change (``recheck_at``)."""

    recheck_at: float
    name: str = "starts-nothing"

    def schedule(self, view: ClusterView) -> Plan:
        return Plan(recheck_at=self.recheck_at)


def test_a_policy_that_never_starts_anything_fails_every_job_at_one_stuck_point() -> None:
    """Its plan cannot change with time and it would start no job even alone: every job
    fails at the first stuck point (not one at a time, a round each)."""
    jobs = [rigid(f"j{i}", 0.0, i) for i in range(6)]
    result = simulate(jobs, _StartsNothing(math.inf))
    assert [name for name, _ in result.rejected] == [f"j{i}" for i in range(6)]
    assert all(reason.startswith(CANNOT_PLACE) for _, reason in result.rejected)
    assert "could not change with time" in result.rejected[0][1]
    assert not result.jobs and not result.unfinished
    assert result.rounds == 1
    again = simulate(jobs, _StartsNothing(math.inf))
    assert again.to_json() == result.to_json()  # deterministic


def test_a_policy_that_starts_nothing_for_now_loses_one_job_then_the_rest() -> None:
    """Its plan may change with time, but it would start no job alone at two stuck points
    in a row: the first job fails at the first, every job left at the second (one stuck
    point per job would cost a long queue idle rounds for each)."""
    retries = 2
    jobs = [rigid(f"j{i}", 0.0, i) for i in range(4)]
    result = simulate(jobs, _StartsNothing(0.0), idle_retries=retries)
    assert [name for name, _ in result.rejected] == [f"j{i}" for i in range(4)]
    assert all(reason.startswith(CANNOT_PLACE) for _, reason in result.rejected)
    assert "nor would it start it alone" in result.rejected[0][1]
    assert all("two stuck points in a row" in reason for _, reason in result.rejected[1:])
    assert not result.jobs and not result.unfinished
    assert result.rounds == 2 * (retries + 1)  # two stuck points, each after its idle rounds
    again = simulate(jobs, _StartsNothing(0.0), idle_retries=retries)
    assert again.to_json() == result.to_json()  # deterministic


@dataclass
class _Deferring:
    """Fifo that starts a job only once it waited ``patience`` seconds (its plan may change
    with time: it asks for every round)."""

    patience: float
    name: str = "deferring"

    def schedule(self, view: ClusterView) -> Plan:
        ready = tuple(j for j in view.pending if view.time - j.request.submit_time >= self.patience)
        return replace(make_policy("fifo").schedule(replace(view, pending=ready)), recheck_at=0.0)


def test_jobs_a_policy_defers_past_a_stuck_point_start_once_one_failed() -> None:
    # submitted at 0 and 100 with a patience of 330 s: idle rounds at 120-300 make 300 a
    # stuck point (idle_retries 3): "a" (refused for now) fails alone, and "b" starts at
    # 480 once its patience passed (the idle rounds at 360 and 420 are not a stuck point)
    jobs = [rigid("a", 0.0, 0), rigid("b", 100.0, 1)]
    result = simulate(jobs, _Deferring(330.0), idle_retries=3)
    assert [name for name, _ in result.rejected] == ["a"]
    assert "nor would it start it alone" in result.rejected[0][1]
    assert [(r.id, r.start_time) for r in result.jobs] == [("b", 480.0)]


@pytest.mark.skipif(not NCF.is_dir(), reason=f"Pollux ncf traces not found at {NCF.resolve()}")
def test_a_profiled_job_wider_than_the_cluster_keeps_its_reason() -> None:
    wide = JobRequest(id="wide", submit_time=0.0, gpus=8, seq=0)
    jobs = (WorkloadJob(wide, ProfiledWork("ncf", 256)), rigid("a", 5.0, 1))
    workload = Workload("w", "pollux", jobs)
    profiles = {"ncf": load_profile(NCF)}
    cluster = Cluster.homogeneous(1, 2)
    result = Simulator(cluster, _StrictSizing(), workload, SimConfig(), profiles).run()
    reason = "asks for 8 GPUs; the cluster has 2 (the policy ran it at its request)"
    assert result.rejected == [("wide", reason)]
    assert [record.id for record in result.jobs] == ["a"]


@dataclass
class _StrictPriority:
    """Strict priority order (highest first, then submission), no backfill, that never
    starts the jobs named in ``refused``: the first of them in its order holds back the
    ones behind it, whatever their submission order."""

    refused: frozenset[str]
    name: str = "strict-priority"

    def schedule(self, view: ClusterView) -> Plan:
        order = sorted(view.pending, key=lambda job: (-job.request.priority, job.request.seq))
        for position, job in enumerate(order):
            if job.id in self.refused:
                order = order[:position]
                break
        ahead = replace(view, pending=tuple(sorted(order, key=lambda job: job.request.seq)))
        return replace(make_policy("fifo").schedule(ahead), recheck_at=math.inf)


def test_the_job_at_the_head_of_the_policys_own_order_fails_not_the_first_submitted() -> None:
    # "x" came last but heads the policy's order (priority 10) and is never started: the
    # jobs submitted before it wait behind it, fit the idle cluster, and run once it fails
    urgent = JobRequest(id="x", submit_time=20.0, seq=2, priority=10, expected_duration=100.0)
    jobs = [rigid("a", 0.0, 0), rigid("b", 10.0, 1), WorkloadJob(urgent, RigidWork(100.0))]
    result = simulate(jobs, _StrictPriority(frozenset({"x"})))
    assert [name for name, _ in result.rejected] == ["x"]
    assert result.rejected[0][1].startswith(CANNOT_PLACE)
    assert sorted(record.id for record in result.jobs) == ["a", "b"]
    assert not result.unfinished


def test_two_blockers_in_a_row_fail_and_the_jobs_behind_them_run() -> None:
    jobs = [rigid("p1", 0.0, 0), rigid("p2", 5.0, 1), rigid("a", 10.0, 2), rigid("b", 20.0, 3)]
    result = simulate(jobs, _NeverStarts(frozenset({"p1", "p2"})))
    assert [name for name, _ in result.rejected] == ["p1", "p2"]
    assert sorted(record.id for record in result.jobs) == ["a", "b"]
    assert not result.unfinished


def test_two_blockers_in_the_policys_order_fail_and_the_first_submitted_run() -> None:
    urgent = [
        WorkloadJob(JobRequest(id=f"x{i}", submit_time=30.0 + i, seq=2 + i, priority=10 - i), w)
        for i, w in enumerate((RigidWork(100.0), RigidWork(100.0)))
    ]
    jobs = [rigid("a", 0.0, 0), rigid("b", 10.0, 1), *urgent]
    result = simulate(jobs, _StrictPriority(frozenset({"x0", "x1"})))
    assert sorted(name for name, _ in result.rejected) == ["x0", "x1"]
    assert sorted(record.id for record in result.jobs) == ["a", "b"]


@dataclass
class _HeldByCompany:
    """Fifo that starts nothing while ``gate`` waits beside other jobs (it would start
    ``gate`` alone): no job is refused on its own, one holds the others back."""

    gate: str
    name: str = "held-by-company"

    def schedule(self, view: ClusterView) -> Plan:
        ids = {job.id for job in view.pending}
        if self.gate in ids and len(ids) > 1:
            return Plan(recheck_at=math.inf)
        return replace(make_policy("fifo").schedule(view), recheck_at=math.inf)


def test_the_job_without_which_the_policy_starts_others_fails_not_the_first_submitted() -> None:
    jobs = [rigid("a", 0.0, 0), rigid("gate", 10.0, 1), rigid("b", 20.0, 2)]
    result = simulate(jobs, _HeldByCompany("gate"))
    assert [name for name, _ in result.rejected] == ["gate"]
    assert sorted(record.id for record in result.jobs) == ["a", "b"]


@pytest.mark.parametrize("gate_at", [MOST_PROBES, MOST_PROBES + 1, 2 * MOST_PROBES + 30])
def test_a_holder_past_the_probed_jobs_fails_alone(gate_at: int) -> None:
    """The rule asks without each of the first MOST_PROBES jobs only (each such plan is over
    the whole queue); a holder behind them was not found, so the first submitted failed in
    its place, one a stuck point, until failed heads brought it in reach (the 159th job as
    holder cost 95 jobs that fit the idle cluster). The first queue prefix the policy starts
    nothing from now names it, asked once it is confirmed."""
    count = gate_at + 3
    jobs = [rigid(f"j{i:03d}", 0.0, i, duration=10.0) for i in range(count)]
    jobs[gate_at] = rigid("gate", 0.0, gate_at, duration=10.0)
    result = simulate(jobs, _HeldByCompany("gate"))
    assert [name for name, _ in result.rejected] == ["gate"]
    assert "would start other jobs without it" in result.rejected[0][1]
    assert len(result.jobs) == count - 1 and not result.unfinished
