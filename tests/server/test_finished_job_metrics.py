"""Records added to a finished job (a user's token may: an eval of a saved checkpoint) are
stored as the attempt of its last run that reported, so that they supersede none of the
job's records. A job requeued and then cancelled before its new run reported ends at an
attempt with no records; a record stored as that attempt, at a step below the last, hid
every record of the run before from its step on. On SQLite and PostgreSQL."""

from __future__ import annotations

from helpers import user_and_nodes
from sqlalchemy import select, update

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database, Job
from danlu.server.services import jobs, metrics

T = 1_000_000.0


def _job(db: Database) -> str:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 1, gpu_type("H100")),), T)
        return jobs.submit(s, {"name": "m", "command": ["true"]}, alice, now=T).id


def _ingest(db: Database, job_id: str, records: list[dict[str, float]], **values: object) -> None:
    with db.session() as s:
        if values:
            s.execute(update(Job).where(Job.id == job_id).values(**values))
        job = s.scalars(select(Job).where(Job.id == job_id)).one()
        metrics.ingest(s, job, records)


def _shown(db: Database, job_id: str) -> list[tuple[int, int | None, str]]:
    with db.read_session() as s:
        rows = metrics.list_metrics(s, job_id)
        return [(m.step, m.attempt, ",".join(sorted(m.data))) for m in rows]


def test_a_record_added_to_a_finished_job_hides_none_of_its_records(db: Database) -> None:
    job_id = _job(db)
    _ingest(db, job_id, [{"step": s, "loss": 1.0 / s} for s in range(1, 6)], attempt=1)
    # preempted, started again (attempt 2), cancelled before the new run reported
    _ingest(db, job_id, [{"step": 2, "val_loss": 0.4}], attempt=2, state="CANCELLED")
    assert _shown(db, job_id) == [
        (1, 1, "loss"),
        (2, 1, "loss"),
        (2, 1, "val_loss"),  # stored as the last run that reported
        (3, 1, "loss"),
        (4, 1, "loss"),
        (5, 1, "loss"),
    ]


def test_a_finished_job_without_records_stores_them_as_its_attempt(db: Database) -> None:
    job_id = _job(db)
    _ingest(db, job_id, [{"step": 7, "val_loss": 0.5}], attempt=3, state="FAILED")
    assert _shown(db, job_id) == [(7, 3, "val_loss")]


def test_a_running_job_still_stores_its_current_attempt(db: Database) -> None:
    job_id = _job(db)
    _ingest(db, job_id, [{"step": s, "loss": 1.0} for s in (1, 2, 3)], attempt=1)
    _ingest(db, job_id, [{"step": 2, "loss": 0.5}], attempt=2, state="RUNNING")
    assert _shown(db, job_id) == [(1, 1, "loss"), (2, 2, "loss")]  # a resumed run's
