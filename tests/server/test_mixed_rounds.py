"""Seeded mixed workloads through the reconcile loop and the in-memory executor, under the
policies that move jobs (danlu, optimus, pollux) and those that preempt by rank (tiresias,
value-density):
elastic jobs that report their steps as danlu.train does, requests for part of a GPU, rigid
jobs with priorities, in projects with and without quotas, runs that fail, run out of
memory, ignore SIGTERM or are cancelled. After every pass no GPU is held by two runs unless
both share it within its memory and no project holds more than its quota, and once the
arrivals stop every job finishes: nothing starves and nothing is lost, on SQLite and
PostgreSQL."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from helpers import TERMINAL, user_and_nodes
from workloads import (
    POLICIES,
    QUOTAS,
    check_gpus,
    check_runs_add_up,
    report_running,
    submit_mixed,
    unfinished,
)

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, projects
from danlu.server.services.projects import Usage, allocation_usage

NOW = 1_000_000.0
SEED = 1
DRAIN_STEP = 60.0
"""Seconds between passes once the arrivals have stopped (30 before): the queue drains in
half the passes, each still checked."""


def _check_quotas(db: Database) -> None:
    """No project holds more GPUs or GPU memory than its quota."""
    held: dict[str, Usage] = {}
    with db.read_session() as s:
        for job in jobs.list_jobs(s, states=["RUNNING", "PREEMPTING"], limit=1000):
            name = job.project.name
            held[name] = held.get(name, Usage()) + allocation_usage(job.allocation)
    for name, quota in QUOTAS.items():
        used = held.get(name, Usage())
        assert used.gpus <= quota.gpus and used.gpu_memory <= quota.gpu_memory, (name, used)


PLACED: dict[str, tuple[str, dict[str, Any]]] = {
    name: (name, options) for name, options in POLICIES.items()
} | {
    f"danlu/placement={strategy}": ("danlu", {"placement": strategy})
    for strategy in ("danlu", "fgd")
}
"""The cases by label: each policy with its options, and the danlu policy placing shares
by the packing scorer and by FGD (the other placement strategies' round path)."""

CASES = [
    (label, backend)
    for label in sorted(PLACED)
    for backend in ("sqlite", "postgresql")
    if backend == "sqlite" or label == "danlu"
]
"""Every case on SQLite; on PostgreSQL the danlu policy, which moves, grows and preempts
jobs (the others run the same loop on the same store code: these are among the suite's
slowest tests). Tiresias on PostgreSQL is left out: a policy never sees the store, its
rounds here run on SQLite, and preemption by rank is recorded on PostgreSQL by
``test_chaos_rounds`` (value-density, the same workload) and ``test_elastic_rounds``
(tiresias)."""


@pytest.mark.parametrize(("policy", "backend"), CASES)
def test_a_mixed_workload_runs_to_completion(db: Database, tmp_path: Path, policy: str) -> None:
    rng = random.Random(SEED)
    inventory = Cluster.homogeneous(1, 4, "H100")
    world = FakeWorld()
    executor = FakeExecutor(inventory, world)
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        for name, quota in QUOTAS.items():
            projects.create_project(
                s, name, quota_gpus=quota.gpus, quota_gpu_memory=quota.gpu_memory, now=NOW
            )
    loop = Reconciler(
        db,
        executor,
        load_settings(home=tmp_path),
        policy=make_policy(PLACED[policy][0], **PLACED[policy][1]),
        preempt_grace=60.0,
    )
    ids: list[str] = []
    steps: dict[str, int] = {}
    try:
        for turn in range(900):
            now = NOW + world.clock()
            if turn < 80 and rng.random() < 0.5:
                job_id = submit_mixed(db, rng, alice, world, f"j{turn}", now)
                if job_id is None:
                    continue
                ids.append(job_id)
            if turn < 80 and rng.random() < 0.03:
                with db.session() as s:
                    victim = jobs.get_job(s, rng.choice(ids))
                    if victim.state not in TERMINAL:
                        jobs.cancel_job(s, victim.id, now=now)
            assert loop.run_once(now=now).errors == []
            check_gpus(executor, world)
            _check_quotas(db)
            if not report_running(db, steps, NOW, now) and turn >= 80:
                break
            world.clock.advance(DRAIN_STEP if turn >= 80 else 30.0)
        assert unfinished(db) == {}
        check_runs_add_up(db)
        assert len(ids) >= 15
    finally:
        loop.stop()
