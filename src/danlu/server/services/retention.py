"""Retention: what a finished job leaves behind is deleted once it is old enough.

With ``DANLU_RETENTION_DAYS`` set, a job finished (SUCCEEDED, FAILED or CANCELLED) longer ago
than that loses its stored metric records (and the ``Idempotency-Key`` of each request
that stored some, ``job_metric_keys``), its logs and run records (the executor's
:meth:`~danlu.executors.Executor.discard`) and the checkpoint directory danlu made for it
under the home (never a spec's ``checkpoint_dir``: that is the user's). A directory danlu made
that some job's spec names as its ``checkpoint_dir`` (the same directory, one inside it or one
containing it, links resolved, as a path or a ``file://`` URL) or its ``workdir`` (the same
directory or one inside it), as a job continuing another's training does, has become that
job's: it stays for good (:func:`spec_paths`); so does the executor's directory of the job
(a Slurm job's working directory, ``executor/work/JOB_ID``) that one names (that directory
or one inside it), and the executor's records and log with it. The job itself and its
events stay, with ``purged_at`` set, so ``danlu ls`` and ``danlu show``
still tell what happened. The reconcile loop purges a batch at a time (:data:`BATCH`): the
files first, outside any transaction (the checkpoint directory, then the executor's records
and log, so that a job whose directory cannot be deleted keeps its log until it is tried
again), then the rows.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
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
SPECS_A_PASS: Final = 5_000
"""Jobs whose spec's ``checkpoint_dir`` one pass reads at most: the purger reads every job's
once (a pass at a time, purging nothing until it has), then those submitted since."""
REREAD: Final = 1_000
"""Jobs read again below the last one read: on PostgreSQL a submission may commit after one
given a later ``seq``, and must not be missed."""

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
    could not be deleted lately: they must not hold up the rest). ``skip`` is passed over
    as the ids are read, not sent with the query: with every job failing (a disk not
    mounted) it holds tens of thousands, past the parameters a statement may bind."""
    query = (
        select(Job.id)
        .where(
            Job.purged_at.is_(None),
            Job.finished_at < cutoff(days, now),
            Job.state.in_(_FINISHED),
        )
        .order_by(Job.finished_at, Job.seq)
        .limit(limit + len(skip))
    )
    return [job_id for job_id in session.scalars(query) if job_id not in skip][:limit]


def spec_paths(
    session: Session, after: int, limit: int = SPECS_A_PASS
) -> list[tuple[int, str | None, str | None]]:
    """``(seq, the spec's checkpoint_dir, its workdir)`` of the jobs after ``seq`` ``after``,
    in ``seq`` order, at most ``limit``: of every job, whatever its state, the purged ones
    included (what a spec names is its user's, also once its job was purged). ``None`` where
    the spec names none."""
    named = (Job.spec["checkpoint_dir"].as_string(), Job.spec["workdir"].as_string())
    query = select(Job.seq, *named).where(Job.seq > after).order_by(Job.seq).limit(limit)
    return [
        (seq, _text(checkpoint_dir), _text(workdir))
        for seq, checkpoint_dir, workdir in session.execute(query)
    ]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Removed:
    """The rows :func:`purged` deleted of one job (or, added up, of a pass)."""

    metric_records: int = 0
    metric_keys: int = 0
    """The ``Idempotency-Key`` rows of the requests that stored them."""

    def __add__(self, other: Removed) -> Removed:
        return Removed(
            self.metric_records + other.metric_records, self.metric_keys + other.metric_keys
        )


def cutoff(days: float, now: float | None = None) -> float:
    """The time before which a job must have finished to be due (:func:`due`)."""
    return resolve_now(now) - days * DAY


def purged(session: Session, job_id: str, now: float | None = None) -> Removed:
    """Mark the job purged (its files are gone) and delete its metric records and the keys
    of the requests that stored them; how many rows of each were deleted.

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
    records = session.execute(delete(JobMetric).where(JobMetric.job_id == job_id))
    keys = session.execute(delete(JobMetricKey).where(JobMetricKey.job_id == job_id))
    return Removed(_count(records), _count(keys))


def _count(result: object) -> int:
    """The rows a DELETE's result says it deleted (0 where the driver does not say)."""
    rowcount = getattr(result, "rowcount", -1)
    return rowcount if isinstance(rowcount, int) and rowcount > 0 else 0
