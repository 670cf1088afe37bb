"""Seeded mixed workloads through the reconcile loop and the in-memory executor, under the
policies that move jobs (danlu, pollux) and those that preempt by rank (tiresias,
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
from helpers import TERMINAL, step_report, user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.core.units import GiB
from danlu.executors import FakeExecutor, FakeWorld, Handle, Outcome
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.errors import AdmissionError
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, metrics, projects
from danlu.server.services.projects import Usage, allocation_usage

NOW = 1_000_000.0
SEED = 1
QUOTAS = {"small": Usage(2.0, 1 << 50), "mid": Usage(3.5, 200 * GiB)}
POLICIES: dict[str, dict[str, Any]] = {
    "danlu": {},
    "pollux": {"population": 16, "generations": 8},
    "tiresias": {},
    "value-density": {},
}


def _body(rng: random.Random, name: str) -> dict[str, Any]:
    kind = rng.random()
    if kind < 0.45:  # elastic: the policy picks its GPUs and batch
        return {
            "name": name,
            "command": ["python", "train.py"],
            "resources": {"gpus": f"1..{rng.choice([2, 4, 8])}"},
            "training": {"global_batch_size": rng.choice([32, 64, 128]), "max_batch_size": 1024},
        }
    if kind < 0.7:  # part of one GPU, by memory
        memory = f"{rng.choice([10, 20, 40])}GiB"
        return {
            "name": name,
            "command": ["python", "train.py"],
            "resources": {"gpus": 1, "gpu_memory": memory},
        }
    return {
        "name": name,
        "command": ["python", "train.py"],
        "resources": {"gpus": rng.choice([1, 2, 4])},
        "training": {"expected_duration": rng.uniform(300, 3000)},
        "priority": rng.randint(0, 3),
    }


def _check_gpus(executor: FakeExecutor, world: FakeWorld) -> None:
    """No GPU held whole by two live runs, or whole beside shares; shares within memory."""
    whole: dict[tuple[int, int], int] = {}
    memory: dict[tuple[int, int], int] = {}
    for run in world.runs.values():
        if not executor.poll(Handle(run.launch.job_id, run.launch.run_attempt)).running:
            continue
        for slot in run.launch.gpus:
            key = (slot.node, slot.gpu)
            if slot.memory is None:
                whole[key] = whole.get(key, 0) + 1
            else:
                memory[key] = memory.get(key, 0) + slot.memory
    assert all(count == 1 and key not in memory for key, count in whole.items()), whole
    assert all(used <= 80 * GiB for used in memory.values()), memory


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


@pytest.mark.parametrize("policy", sorted(POLICIES))
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
        policy=make_policy(policy, **POLICIES[policy]),
        preempt_grace=60.0,
    )
    ids: list[str] = []
    steps: dict[str, int] = {}
    try:
        for turn in range(900):
            now = NOW + world.clock()
            if turn < 80 and rng.random() < 0.5:
                body = {**_body(rng, f"j{turn}"), "project": rng.choice(["default", *QUOTAS])}
                try:
                    with db.session() as s:
                        job = jobs.submit(s, body, alice, now=now)
                except AdmissionError:  # wider than its project's quota: refused at once
                    continue
                ids.append(job.id)
                outcome = rng.choice([Outcome.SUCCEEDED] * 6 + [Outcome.FAILED, Outcome.OOM])
                world.script(
                    job.id,
                    duration=rng.uniform(60, 1200),
                    outcome=outcome,
                    checkpoint_seconds=rng.choice([0.0, 10.0, 45.0, None]),
                    resumable=True,
                )
            if turn < 80 and rng.random() < 0.03:
                with db.session() as s:
                    victim = jobs.get_job(s, rng.choice(ids))
                    if victim.state not in TERMINAL:
                        jobs.cancel_job(s, victim.id, now=now)
            assert loop.run_once(now=now).errors == []
            _check_gpus(executor, world)
            _check_quotas(db)
            with db.session() as s:
                running = jobs.list_jobs(s, states=["RUNNING"])
                if turn >= 80 and not running and not jobs.list_jobs(s, states=["PENDING"]):
                    break
                for job in running:
                    if job.allocation and job.spec.get("training", {}).get("max_batch_size"):
                        gpus = len(job.allocation)
                        nodes = len({share["node"] for share in job.allocation})
                        batch = job.batch_size or 64
                        done = min(0.99, (now - NOW) / 20_000)
                        step = steps.get(job.id, 0)
                        steps[job.id] = step + 2
                        reports = [step_report(step + k, gpus, nodes, batch, done) for k in (0, 1)]
                        metrics.ingest(s, job, reports, now=now)
            world.clock.advance(30.0)
        with db.read_session() as s:
            left = {j.name: j.state for j in jobs.list_jobs(s, limit=1000)}
        assert {name: state for name, state in left.items() if state not in TERMINAL} == {}
        assert len(ids) >= 15
    finally:
        loop.stop()
