"""What a stuck point asks the policy: each set of waiting jobs once, and under ``pollux`` a
job it cannot size costs no allocation search; the jobs that fail are the same."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from danlu.core.cluster import Cluster
from danlu.sched.policies import pollux_search as ps
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan
from danlu.sim.progress import RigidProgress
from danlu.sim.simjob import SimJob
from danlu.sim.stuck import HELD_BACK, NONE_ALONE, REFUSED_NOW, AskPolicy, StuckRule

CLUSTER = Cluster.homogeneous(4, 4)
# batch limits that fill at most 2 GPUs (64 / 32), for a request of at least 4: pollux
# never sizes such a job, and would start none of them, alone or together
UNSIZABLE = {
    "adaptive": 1.0,
    "init_batch": 64.0,
    "max_batch": 64.0,
    "min_local_bsz": 32.0,
    "max_local_bsz": 64.0,
}


def waiting_jobs(count: int, gpus: int, max_gpus: int = 0) -> list[SimJob]:
    return [
        SimJob(
            JobRequest(id=f"j{i}", submit_time=0.0, seq=i, gpus=gpus, max_gpus=max_gpus),
            RigidProgress(100.0),
        )
        for i in range(count)
    ]


def test_with_two_jobs_held_back_the_policy_is_asked_about_each_set_once() -> None:
    """Without the first of two jobs the queue is the second alone: already asked."""
    asked: list[tuple[str, ...]] = []
    fifo = make_policy("fifo")

    def ask(jobs: Sequence[SimJob]) -> Plan:
        asked.append(tuple(job.id for job in jobs))
        view = ClusterView(60.0, CLUSTER, pending=tuple(job.status() for job in jobs))
        return fifo.schedule(view) if len(jobs) == 1 else Plan()  # held with company

    jobs = waiting_jobs(2, gpus=1)
    failing = StuckRule(CLUSTER).choose(jobs, 60.0, ask)
    assert [(job.id, reason) for job, reason in failing] == [("j0", HELD_BACK)]
    assert asked == [("j0",), ("j1",)]


def _pollux_stuck_points(count: int) -> tuple[list[list[tuple[str, str]]], int]:
    """The jobs failed at two stuck points in a row (60 s apart) of ``count`` jobs pollux
    cannot size, and how many plans were asked for."""
    policy = make_policy("pollux")
    asks = 0

    def ask_at(now: float) -> AskPolicy:
        def ask(jobs: Sequence[SimJob]) -> Plan:
            nonlocal asks
            asks += 1
            pending = tuple(JobStatus(job.request, observed=UNSIZABLE) for job in jobs)
            return policy.schedule(ClusterView(now, CLUSTER, pending=pending))

        return ask

    rule = StuckRule(CLUSTER)
    jobs = waiting_jobs(count, gpus=4, max_gpus=8)
    failed: list[list[tuple[str, str]]] = []
    for now in (600.0, 660.0):
        failing = rule.choose(jobs, now, ask_at(now))
        failed.append([(job.id, reason) for job, reason in failing])
        gone = {job.id for job, _ in failing}
        jobs = [job for job in jobs if job.id not in gone]
    return failed, asks


def test_jobs_pollux_cannot_size_fail_as_they_did_with_the_whole_search() -> None:
    quick, asks = _pollux_stuck_points(6)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ps, "nothing_to_give", lambda problem: False, raising=False)
        whole, _ = _pollux_stuck_points(6)
    assert quick == whole
    assert quick[0] == [("j0", REFUSED_NOW)]
    assert quick[1] == [(f"j{i}", NONE_ALONE) for i in range(1, 6)]
    assert asks == 6 + 5  # each job alone, at each stuck point


def test_a_pollux_stuck_point_runs_no_search_for_a_job_it_cannot_size() -> None:
    drew: list[bool] = []  # per search: whether it drew from its generator (ran a generation)
    search = ps.search

    def watched(
        problem: ps.SearchProblem, seeds: ps.IntArray, rng: np.random.Generator, *rest: int
    ) -> ps.IntArray:
        before = rng.bit_generator.state
        result = search(problem, seeds, rng, *rest)
        drew.append(rng.bit_generator.state != before)
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ps, "search", watched)
        failed, asks = _pollux_stuck_points(3)
    assert [len(point) for point in failed] == [1, 2]
    assert len(drew) == asks == 3 + 2 and not any(drew)
