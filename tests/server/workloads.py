"""The seeded mixed workload of the reconcile-loop tests that run whole workloads through
the in-memory executor (``test_mixed_rounds``, ``test_chaos_rounds``): what is submitted, how
its runs end, the steps its elastic jobs report, and the check that no GPU is held twice."""

from __future__ import annotations

import random
from typing import Any

from helpers import TERMINAL, step_report
from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.core.units import GiB
from danlu.executors import FakeExecutor, FakeWorld, Handle, Outcome
from danlu.server.db import Database, Job, JobRun, User
from danlu.server.errors import AdmissionError
from danlu.server.services import jobs, metrics
from danlu.server.services.projects import Usage

QUOTAS = {"small": Usage(2.0, 1 << 50), "mid": Usage(3.5, 200 * GiB)}
"""The projects with a quota (GPUs, GPU memory); jobs go to these or to ``default``."""

POLICIES: dict[str, dict[str, Any]] = {
    "danlu": {},
    "optimus": {},
    "pollux": {"population": 16, "generations": 8},
    "tiresias": {},
    "value-density": {},
}
"""The policies that move or preempt jobs, with options that keep the tests quick."""


def mixed_body(rng: random.Random, name: str) -> dict[str, Any]:
    """A job: elastic (the policy picks its GPUs and batch), part of one GPU by memory, or
    rigid with a priority and an expected duration."""
    kind = rng.random()
    if kind < 0.45:
        return {
            "name": name,
            "command": ["python", "train.py"],
            "resources": {"gpus": f"1..{rng.choice([2, 4, 8])}"},
            "training": {"global_batch_size": rng.choice([32, 64, 128]), "max_batch_size": 1024},
        }
    if kind < 0.7:
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


def submit_mixed(
    db: Database, rng: random.Random, owner: User, world: FakeWorld, name: str, now: float
) -> str | None:
    """Submit the mixed job ``name`` to ``default`` or a project with a quota and script its
    runs; its id, or None when its project's quota refuses it at once (wider than it)."""
    body = {**mixed_body(rng, name), "project": rng.choice(["default", *QUOTAS])}
    try:
        with db.session() as s:
            job_id = jobs.submit(s, body, owner, now=now).id
    except AdmissionError:
        return None
    script_runs(world, rng, job_id)
    return job_id


def script_runs(world: FakeWorld, rng: random.Random, job_id: str) -> None:
    """How ``job_id``'s runs go: 60-1200 s of work kept across checkpoints; one in four
    fails or runs out of memory; a checkpoint takes 0-45 s, or SIGTERM is ignored."""
    outcome = rng.choice([Outcome.SUCCEEDED] * 6 + [Outcome.FAILED, Outcome.OOM])
    world.script(
        job_id,
        duration=rng.uniform(60, 1200),
        outcome=outcome,
        checkpoint_seconds=rng.choice([0.0, 10.0, 45.0, None]),
        resumable=True,
    )


def report_steps(
    session: Session, running: list[Job], steps: dict[str, int], elapsed: float, now: float
) -> None:
    """Two steps of every running elastic job, as danlu.train reports them (``steps``
    counts each job's steps so far; progress grows with ``elapsed``)."""
    for job in running:
        if job.allocation and job.spec.get("training", {}).get("max_batch_size"):
            gpus = len(job.allocation)
            nodes = len({share["node"] for share in job.allocation})
            batch = job.batch_size or 64
            done = min(0.99, elapsed / 20_000)
            step = steps.get(job.id, 0)
            steps[job.id] = step + 2
            reports = [step_report(step + k, gpus, nodes, batch, done) for k in (0, 1)]
            metrics.ingest(session, job, reports, now=now)


def report_running(db: Database, steps: dict[str, int], start: float, now: float) -> bool:
    """:func:`report_steps` of the running jobs (``start``: the run's time 0); whether any
    job still runs, waits or is being preempted."""
    with db.session() as s:
        running = jobs.list_jobs(s, states=["RUNNING"])
        report_steps(s, running, steps, now - start, now)
        return bool(running or jobs.list_jobs(s, states=["PENDING", "PREEMPTING"], limit=1))


def unfinished(db: Database) -> dict[str, str]:
    """The state of each job that has not finished, by name."""
    with db.read_session() as s:
        return {j.name: j.state for j in jobs.list_jobs(s, limit=1000) if j.state not in TERMINAL}


def check_gpus(executor: FakeExecutor, world: FakeWorld) -> None:
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


def check_runs_add_up(db: Database) -> None:
    """Every job's recorded stretches on GPUs (``job_runs``, what the usage report sums) add
    up to the GPU-seconds it was accounted (``attained_service``), whatever ended them."""
    with db.read_session() as s:
        service = {job_id: a for job_id, a in s.execute(select(Job.id, Job.attained_service))}
        runs: dict[str, float] = {}
        for job_id, start, end, milli in s.execute(
            select(JobRun.job_id, JobRun.started_at, JobRun.ended_at, JobRun.gpu_milli)
        ):
            runs[job_id] = runs.get(job_id, 0.0) + (end - start) * milli / 1000
    for job_id, attained in service.items():
        assert abs(runs.get(job_id, 0.0) - attained) <= 1e-6 * max(1.0, attained), job_id
