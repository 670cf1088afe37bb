"""Rounds of the danlu policy recorded in the store with elastic jobs that measure
themselves: the jobs report step times as danlu.train does (metrics.ingest), the policy
grows, shrinks and preempts them, and the store's rules (a preempted job holds its GPUs
until it exits) apply to every plan, on SQLite and PostgreSQL."""

from __future__ import annotations

import random
from typing import Any

import pytest
from helpers import record_round, step_report, user_and_nodes
from sqlalchemy.orm import Session

from danlu.core.cluster import Node, gpu_type
from danlu.sched.registry import default_registry, make_policy
from danlu.server.db import Database
from danlu.server.db.models import Job
from danlu.server.services import jobs, metrics, view

NOW = 1_000_000.0


def _elastic(name: str, most: int) -> dict[str, Any]:
    return {
        "name": name,
        "command": ["true"],
        "resources": {"gpus": f"1..{most}"},
        "training": {"global_batch_size": 64, "max_batch_size": 1024},
    }


def _minute(job: Job) -> float:
    """The work a running job does in a round, sublinear in its GPUs."""
    gpus = len(job.allocation or [])
    return 0.02 * gpus / (1 + 0.1 * gpus)


def _measure(session: Session, job: Job, step: int, progress: float, now: float) -> None:
    """Three steps of ``job`` on its GPUs, reported as danlu.train reports them."""
    gpus = len(job.allocation or [])
    nodes = len({share["node"] for share in job.allocation or []})
    batch = job.batch_size or 64
    reports = [step_report(step + k, gpus, nodes, batch, progress) for k in range(3)]
    metrics.ingest(session, job, reports, now=now)


def test_danlu_rounds_with_measured_elastic_jobs_keep_the_store_consistent(db: Database) -> None:
    rng = random.Random(1)
    with db.session() as s:
        nodes = [Node(f"node-{i}", 8, gpu_type("H100")) for i in range(4)]
        alice = user_and_nodes(s, nodes, NOW)
        for i in range(24):
            jobs.submit(s, _elastic(f"e{i}", rng.choice([4, 8, 16])), alice, now=NOW + 30 * i)
    policy = make_policy("danlu", min_hold=0, grow_after=0)
    done: dict[str, float] = {}
    steps: dict[str, int] = {}
    moved = preempted = finished = 0
    moves: dict[str, int] = {}  # resizes and resumes recorded, per job
    ran: set[str] = set()
    t = NOW
    for _ in range(30):
        t += 60
        applied = record_round(db, policy, t)
        moved += len(applied.resized)
        preempted += len(applied.preempted)
        for job in applied.resized + applied.started:
            assert job.allocation and len(job.allocation) <= 16
            if job in applied.resized or job.id in ran:
                moves[job.id] = moves.get(job.id, 0) + 1
            ran.add(job.id)
        with db.read_session() as s:
            snap = view.build_snapshot(s, t)
            used = sum(j.allocation.num_gpus for j in snap.view.running)
            assert used <= snap.view.cluster.total_gpus
            gpus_of = [(g.node, g.gpu) for j in snap.view.running for g in j.allocation.shares]
            assert len(gpus_of) == len(set(gpus_of))  # no GPU held twice
        with db.session() as s:
            for job in jobs.list_jobs(s, states=["RUNNING", "PREEMPTING"]):
                if job.state == "PREEMPTING":  # it has checkpointed by the next round
                    jobs.settle_exit(s, job, succeeded=True, exit_code=0, reason="ckpt", now=t)
                    continue
                done[job.id] = min(1.0, done.get(job.id, 0.0) + _minute(job))
                if done[job.id] >= 1.0:
                    jobs.settle_exit(s, job, succeeded=True, exit_code=0, reason="done", now=t)
                    finished += 1
                    continue
                step = steps.get(job.id, 0)
                _measure(s, job, step, done[job.id], t)
                steps[job.id] = step + 3
    # 18 moves, 6 preemptions, 6 jobs done (the first round of these failed before moves
    # released their GPUs first: a plan that moves a job onto GPUs another leaves), and
    # the move counts matched only once the store added the policy's marks to the job's
    # and left out those of the moves that waited
    assert moved > 0 and preempted > 0 and finished > 0
    with db.read_session() as s:  # the policy's move count is what the store recorded
        counted = {job.id: (job.marks or {}).get("danlu.moves", 0.0) for job in jobs.list_jobs(s)}
    assert counted == {job_id: float(moves.get(job_id, 0)) for job_id in counted}


def _mixed(rng: random.Random, name: str) -> dict[str, Any]:
    """An elastic job (half), one sharing a GPU by memory (a fifth) or a rigid one."""
    draw = rng.random()
    if draw < 0.5:
        return _elastic(name, rng.choice([2, 4, 8, 16]))
    if draw < 0.7:
        resources = {"gpus": 1, "gpu_memory": f"{rng.choice([10, 20, 40])}GiB"}
        return {"name": name, "command": ["true"], "resources": resources}
    return {
        "name": name,
        "command": ["true"],
        "resources": {"gpus": rng.choice([1, 2, 4, 8])},
        "training": {"expected_duration": rng.uniform(300, 3000)},
        "priority": rng.randint(0, 3),
    }


CAPACITY_CASES = [
    (backend, name)
    for backend in ("sqlite", "postgresql")
    for name in default_registry().names()
    if backend == "sqlite" or name in ("danlu", "tiresias")
]
"""Every policy on SQLite; on PostgreSQL one that moves, grows and preempts jobs (danlu)
and one that preempts by rank (tiresias). A policy never sees the store: what PostgreSQL
adds is the SQL that records a round's starts, resizes and preemptions, which those two
run (and ``test_danlu_rounds_with_measured_elastic_jobs_keep_the_store_consistent``, on
both stores). Left out on PostgreSQL: fair-share, fifo, optimus, pollux, priority, sjf
and value-density, each run on SQLite here, whose rounds on PostgreSQL ran that same SQL
again and were among the suite's slowest tests."""


@pytest.mark.parametrize(("backend", "name"), CAPACITY_CASES)
def test_every_policy_s_rounds_keep_each_gpu_within_its_capacity(db: Database, name: str) -> None:
    # a mixed workload on nodes of 4 and 8 GPUs; the running jobs report step times, some
    # finish, the preempted ones exit by the next round
    rng = random.Random(name)
    options: dict[str, Any] = {"danlu": {"min_hold": 0, "grow_after": 0}}.get(name, {})
    if name == "pollux":
        options = {"population": 16, "generations": 8}
    with db.session() as s:
        nodes = [Node(f"node-{i}", 4 + 4 * (i % 2), gpu_type("H100")) for i in range(4)]
        alice = user_and_nodes(s, nodes, NOW)
        for i in range(30):
            jobs.submit(s, _mixed(rng, f"j{i}"), alice, now=NOW + 20 * i)
    policy = make_policy(name, **options)
    done: dict[str, float] = {}
    t = NOW
    for round_number in range(20):
        t += 60
        record_round(db, policy, t)
        with db.read_session() as s:
            running = view.build_snapshot(s, t).view.running
        milli: dict[tuple[int, int], int] = {}
        for job in running:
            for share in job.allocation.shares:
                key = (share.node, share.gpu)
                milli[key] = milli.get(key, 0) + share.milli
        assert max(milli.values(), default=0) <= 1000, (round_number, milli)
        with db.session() as s:
            for job in jobs.list_jobs(s, states=["RUNNING", "PREEMPTING"]):
                if job.state == "PREEMPTING" or rng.random() < 0.05:
                    jobs.settle_exit(s, job, succeeded=True, exit_code=0, reason="exit", now=t)
                    continue
                done[job.id] = min(0.99, done.get(job.id, 0.0) + _minute(job))
                _measure(s, job, 3 * round_number, done[job.id], t)
