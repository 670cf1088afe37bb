"""Training metrics reported by ``danlu.train`` (a batch of dicts per request)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from danlu.core.errors import SpecError
from danlu.core.values import MAX_INT, check_text, quoted
from danlu.server.db.models import Job, JobMetric
from danlu.server.errors import ConflictError
from danlu.server.services import observe
from danlu.server.services.common import lock_row, resolve_now

MAX_BATCH = 1000
MAX_RECORD_BYTES = 16_384
MAX_READ = 10_000


def _clean(value: Any, field: str) -> Any:
    """One metric value as stored: NaN and infinities become null (a diverged loss is still
    a record, and the rest of its batch is kept); what the store cannot hold is an error."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        check_text(value, field)
        return value
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            raise SpecError(field, f"must be between -2**62 and 2**62 (got {quoted(value)})")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None  # NaN / inf are not JSON: store null (the anomaly is the point)
        return value
    raise SpecError(field, "metric values must be numbers, strings, booleans or null")


MAX_TIME = 253_402_300_800.0
"""A record's ``time`` is below this: 10000-01-01 in POSIX seconds (a time in milliseconds or
nanoseconds is far past it, and no clock formats a later year)."""


def _seconds(value: Any, field: str) -> float:
    """A record's ``time`` as a float; :class:`SpecError` naming ``field`` for anything but a
    number of POSIX seconds from 0 to the year 9999 (a time in milliseconds or nanoseconds,
    ``time.time_ns()``, is refused: it reads as a date thousands of years away)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(field, "must be a number of POSIX seconds")
    try:
        seconds = float(value)
    except OverflowError:  # an integer past ~1.8e308
        seconds = math.inf
    if not 0.0 <= seconds < MAX_TIME:  # NaN too
        big = isinstance(value, int) and math.isinf(seconds)
        shown = "an integer beyond 1e308" if big else quoted(value)
        raise SpecError(
            field,
            f"must be POSIX seconds from 0 to {MAX_TIME:.0f} (the year 9999), got {shown}: "
            "send time.time(), not milliseconds or nanoseconds",
        )
    return seconds


def ingest(
    session: Session,
    job: Job,
    records: Sequence[Mapping[str, Any]],
    now: float | None = None,
) -> int:
    """Store ``records`` for ``job``; each needs an integer ``step`` (>= 0) and may carry a
    ``time`` (POSIX seconds; default now) and flat scalar values. A ``checkpoint_step`` value
    updates the job's last checkpoint; while the job holds GPUs, the step times and the
    rest of danlu.train's record update its measurement (see
    :mod:`~danlu.server.services.observe`). Returns the number stored.

    A job the retention purged takes no more records (:class:`ConflictError`: nothing
    would ever delete them). The job's row is locked first (read again,
    :func:`~danlu.server.services.common.lock_row`), as the purge locks it before it
    deletes (:func:`~danlu.server.services.retention.purged`): a purge that comes meanwhile
    waits and deletes these records too, and a report that comes during a purge waits and
    is refused."""
    t = resolve_now(now)
    if len(records) > MAX_BATCH:
        raise SpecError("metrics", f"at most {MAX_BATCH} records per request")
    job = lock_row(session, Job, job.id)
    if job.purged_at is not None:
        raise ConflictError(
            f"job {job.id}: its metric records were deleted by the retention "
            f"(DANLU_RETENTION_DAYS) at {job.purged_at:.0f}; it takes no new ones"
        )
    last = job.last_step
    checkpoint = job.checkpoint_step
    rows = []
    for i, record in enumerate(records):
        where = f"metrics.{i}"
        if not isinstance(record, Mapping):
            raise SpecError(where, "each metric record must be an object")
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_INT:
            raise SpecError(f"{where}.step", f"an integer step in 0..{MAX_INT} is required")
        when = _seconds(record.get("time", t), f"{where}.time")
        for key in record:
            check_text(str(key), where, "metric names")
        data = {
            str(k): _clean(v, f"{where}.{k}")
            for k, v in record.items()
            if k not in ("step", "time")
        }
        if len(json.dumps(data)) > MAX_RECORD_BYTES:
            raise SpecError(where, f"a record may hold at most {MAX_RECORD_BYTES} bytes of JSON")
        ckpt = data.get("checkpoint_step")
        if isinstance(ckpt, int) and not isinstance(ckpt, bool):
            if not 0 <= ckpt <= MAX_INT:
                raise SpecError(f"{where}.checkpoint_step", f"must lie within 0..{MAX_INT}")
            checkpoint = max(checkpoint or 0, ckpt)
        last = step if last is None else max(last, step)
        rows.append(JobMetric(job_id=job.id, step=step, time=when, data=data))
    session.add_all(rows)
    values: dict[str, Any] = {}
    if last is not None and last != job.last_step:
        values["last_step"] = _raise_to(Job.last_step, last)
    if checkpoint is not None and checkpoint != job.checkpoint_step:
        values["checkpoint_step"] = _raise_to(Job.checkpoint_step, checkpoint)
    seen = observe.measurement([row.data for row in rows]) if job.allocation else None
    stored = observe.merged(job.observed, seen) if seen is not None else None
    if stored is not None:
        # read by the scheduler's adapter; the counter tells its status cache (a Core
        # UPDATE leaves ``version``, like the rest of a progress report)
        values["observed"] = stored
        values["observed_version"] = Job.observed_version + 1
    if values:
        # A Core UPDATE: progress reports must not bump the job's optimistic version (they
        # would race every state change the reconcile loop makes).
        session.execute(
            update(Job)
            .where(Job.id == job.id)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        session.expire(job, list(values))
    session.flush()
    return len(rows)


def _raise_to(column: Any, value: int) -> Any:
    return case((column.is_(None), value), (column < value, value), else_=column)


def list_metrics(
    session: Session,
    job_id: str,
    *,
    after_step: int = -1,
    limit: int = 1000,
    tail: bool = False,
    after_id: int | None = None,
) -> list[JobMetric]:
    """A job's metric records with ``step > after_step``, by step then arrival: the first
    ``limit`` of them, or with ``tail`` the last ``limit``. With ``after_id`` (a cursor,
    :func:`cursor`), only the records stored after it, in the order they came (whatever
    their step: a restarted run reports earlier steps again)."""
    if not 1 <= limit <= MAX_READ:
        raise SpecError("limit", f"must be between 1 and {MAX_READ}")
    query = select(JobMetric).where(JobMetric.job_id == job_id, JobMetric.step > after_step)
    if after_id is not None:
        query = query.where(JobMetric.id > after_id)
        if tail:
            latest = query.order_by(JobMetric.id.desc()).limit(limit)
            return list(reversed(list(session.scalars(latest))))
        return list(session.scalars(query.order_by(JobMetric.id).limit(limit)))
    if tail:
        latest = query.order_by(JobMetric.step.desc(), JobMetric.id.desc()).limit(limit)
        return list(reversed(list(session.scalars(latest))))
    return list(session.scalars(query.order_by(JobMetric.step, JobMetric.id).limit(limit)))


def cursor(session: Session, job_id: str) -> int:
    """The job's newest record id (0 when it has none): ``after_id`` for the records
    stored from now on."""
    newest = session.scalar(select(func.max(JobMetric.id)).where(JobMetric.job_id == job_id))
    return int(newest or 0)
