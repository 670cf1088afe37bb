"""A job preempted before the executor launched its run (PREEMPTING, ``launched_attempt`` below
``attempt``) runs nothing: its Job read ``launched: true`` and its ``why`` said
``checkpointing before re-queue`` as for a run that checkpoints. It now reads ``launched``
false and its ``why`` says it was stopped before its launch; a launched run preempted reads
as before. Against the fake executor, whose launch is refused (a GPU still busy), and the
round's own preemption (:func:`~danlu.server.services.record.apply_plan`)."""

from __future__ import annotations

from pathlib import Path

from helpers import user_and_nodes
from test_unlaunchable import busy_launches

from danlu.core.cluster import Cluster
from danlu.core.state import JobState
from danlu.sched.view import Plan, Preempt
from danlu.server.db import Database
from danlu.server.routes.schemas.jobs import job_out
from danlu.server.services import jobs
from danlu.server.services.record import apply_plan
from danlu.server.services.view import build_snapshot

NOW = 1_000_000.0
INVENTORY = Cluster.homogeneous(1, 1, "H100")
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
STOPPED = (
    "not launched: stopped before its launch, nothing ran to checkpoint (its GPUs are freed "
    "at the next pass)"
)
"""What ``why`` says after ``placed on GPUS, `` of such a job."""


def _preempt(db: Database, job_id: str, t: float) -> None:
    """The round's preemption of ``job_id``, as the reconcile loop records a plan."""
    with db.session() as s:
        snap = build_snapshot(s, t)
        apply_plan(s, Plan(preempts=(Preempt(job_id, "make room"),)), t, snap.withheld, snap)


def test_a_job_preempted_before_its_launch_reads_not_launched(
    sqlite_db: Database, tmp_path: Path
) -> None:
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        job_id = jobs.submit(s, {"name": "waits", **BODY}, alice, now=NOW).id
    # placed at NOW; the executor refuses its launch (its GPU still busy)
    with busy_launches(sqlite_db, tmp_path, INVENTORY, job_id, 1000, NOW):
        _preempt(sqlite_db, job_id, NOW + 5)
        with sqlite_db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, jobs.not_launched(job)) == (JobState.PREEMPTING.value, True)
            assert job_out(job)["launched"] is False
            assert jobs.why(s, job, now=NOW + 6) == f"placed on node-0:0, {STOPPED}"
        with sqlite_db.session() as s:  # held meanwhile: nothing is said to be preempted next
            jobs.hold(s, job_id, True, alice, now=NOW + 7)
            why = jobs.why(s, jobs.get_job(s, job_id), now=NOW + 7)
            assert why.endswith(f"{STOPPED}; held: it waits until released")


def test_a_launched_run_preempted_reads_launched_and_checkpointing(sqlite_db: Database) -> None:
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        job = jobs.submit(s, {"name": "ran", **BODY}, alice, now=NOW)
        share = {"node": "node-0", "gpu": 0, "milli": 1000, "memory": 80 * 2**30}
        jobs.change_state(s, job, JobState.RUNNING, "go", NOW, allocation=[share])
        job.launched_attempt = job.attempt
        job_id = job.id
    _preempt(sqlite_db, job_id, NOW + 5)
    with sqlite_db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert (job.state, job_out(job)["launched"]) == (JobState.PREEMPTING.value, True)
        assert jobs.why(s, job, now=NOW + 6) == "checkpointing before re-queue on node-0:0"
