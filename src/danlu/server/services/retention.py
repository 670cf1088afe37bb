"""Retention: what a finished job leaves behind is deleted once it is old enough.

With ``DANLU_RETENTION_DAYS`` set, a job finished (SUCCEEDED, FAILED or CANCELLED) longer ago
than that loses its stored metric records (and the ``Idempotency-Key`` of each request
that stored some, ``job_metric_keys``), its logs and run records (the executor's
:meth:`~danlu.executors.Executor.discard`) and the checkpoint directory danlu made for it
under the home (never a spec's ``checkpoint_dir``: that is the user's). The job itself and
its events stay, with ``purged_at`` set, so ``danlu ls`` and ``danlu show`` still tell what
happened. The reconcile loop purges a batch at a time (:data:`BATCH`): the files first,
outside any transaction, then the rows.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from danlu.core.state import JobState
from danlu.server.db.models import Job, JobMetric, JobMetricKey
from danlu.server.services.common import resolve_now

DAY: Final = 86_400.0
BATCH: Final = 100
"""Jobs purged in one pass at most."""
PASS_SECONDS: Final = 1.0
"""Seconds one pass may spend deleting (large checkpoints on a slow file system): the
reconcile loop schedules nothing meanwhile; what is left goes on in the next pass."""
EVERY: Final = 600.0
"""Seconds between purge passes once a pass found fewer than :data:`BATCH` jobs due."""

_FINISHED: Final = [s.value for s in JobState if s.terminal]


def due(
    session: Session,
    days: float,
    now: float | None = None,
    limit: int = BATCH,
    skip: Collection[str] = (),
) -> list[str]:
    """The finished jobs not purged yet that finished more than ``days`` ago, oldest
    first (the index ``ix_jobs_purged_at_finished_at``), but those in ``skip`` (their files
    could not be deleted lately: they must not hold up the rest)."""
    cutoff = resolve_now(now) - days * DAY
    query = (
        select(Job.id)
        .where(Job.purged_at.is_(None), Job.finished_at < cutoff, Job.state.in_(_FINISHED))
        .order_by(Job.finished_at, Job.seq)
        .limit(limit)
    )
    if skip:
        query = query.where(Job.id.not_in(sorted(skip)))
    return list(session.scalars(query))


def purged(session: Session, job_id: str, now: float | None = None) -> None:
    """Mark the job purged (its files are gone) and delete its metric records and the keys
    of the requests that stored them.

    The mark comes first: its UPDATE locks the job's row, so a report being stored
    (:func:`~danlu.server.services.metrics.ingest` locks the row too) commits before the
    DELETE reads, which then deletes its records as well, and a later report reads the
    mark and is refused. Deleted first, a report committed in between outlived the purge
    (and a purged job is never selected again)."""
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.purged_at.is_(None))
        .values(purged_at=resolve_now(now))
        .execution_options(synchronize_session=False)
    )
    session.execute(delete(JobMetric).where(JobMetric.job_id == job_id))
    session.execute(delete(JobMetricKey).where(JobMetricKey.job_id == job_id))
