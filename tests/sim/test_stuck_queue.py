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
    assert policy.started == ["a", "b"]


def test_each_head_that_holds_the_queue_after_a_start_fails_alone() -> None:
    jobs = [rigid("p1", 0.0, 0), rigid("a", 10.0, 1), rigid("p2", 20.0, 2), rigid("b", 30.0, 3)]
    result = simulate(jobs, _NeverStarts(frozenset({"p1", "p2"})))
    assert [name for name, _ in result.rejected] == ["p1", "p2"]
    assert sorted(record.id for record in result.jobs) == ["a", "b"]


@pytest.mark.parametrize(("recheck_at", "retries"), [(math.inf, 5), (0.0, 2)])
def test_a_policy_that_starts_nothing_fails_every_job_once_a_head_failed_in_vain(
    recheck_at: float, retries: int
) -> None:
    """The last resort: the first job failed, and still nothing started: the rest fail at
    once instead of one at a time (a long queue would cost rounds for each)."""

    @dataclass
    class StartsNothing:
        name: str = "starts-nothing"
        rounds: int = 0

        def schedule(self, view: ClusterView) -> Plan:
            self.rounds += 1
            return Plan(recheck_at=recheck_at)

    jobs = [rigid(f"j{i}", 0.0, i) for i in range(6)]
    policy = StartsNothing()
    result = simulate(jobs, policy, idle_retries=retries)
    assert [name for name, _ in result.rejected] == [f"j{i}" for i in range(6)]
    assert all(reason.startswith(CANNOT_PLACE) for _, reason in result.rejected)
    assert not result.jobs and not result.unfinished
    # two stuck points: the head's, then everyone's; each after its idle rounds
    per_stuck = 1 if recheck_at == math.inf else retries + 1
    assert result.rounds == policy.rounds == 2 * per_stuck
    again = simulate(jobs, StartsNothing(), idle_retries=retries)
    assert again.to_json() == result.to_json()  # deterministic


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
