"""Training metrics reported by ``danlu.train`` (a batch of dicts per request).

A request may carry an ``Idempotency-Key`` (danlu.train's reporter sends one, the same on
every resend of the same records): the job remembers the keys it stored for a day
(:data:`KEY_DAYS`, ``job_metric_keys``), and a request with a key it stored already is
answered with the count stored then, storing nothing, so a request the client timed out
on but the server committed is not stored twice when sent again. A request without a key
is stored every time it comes (as before keys).

Each record keeps the job's attempt whose run reported it (:func:`reporting_attempt`). A run
resumed from a checkpoint (after a preemption, a failure, a resize: each start is a new
attempt) reports again the steps after that checkpoint; the earlier run's records of those
steps are **superseded**: a record is when a later attempt of the job reported a step at or
below its step. The list hides them unless asked (:func:`list_metrics`), and
:class:`Supersession` tells which they are. Several records of one step within one attempt
(a train loss and an eval) are all kept. Records stored before attempts were kept count as
attempt 0.

Within one attempt, danlu.train may roll back in process to a checkpoint (anomaly recovery)
and redo the steps after it: the replay's records carry ``rollback`` (:data:`ROLLBACK`), its
rollback generation (1, after a second rollback 2, ...), and a record of an earlier
generation of the attempt is superseded when a later generation of it reported a step at or
below its step, as by a later attempt. A record is thus superseded when a record of a later
(attempt, generation) pair reported a step at or below its own. A record without the field
is of the attempt's latest generation so far (0 before any rollback: the first try's; a
user's eval sent during the replay is the replay's), so a client that never sends it is
told apart by attempts alone, as before."""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    case,
    delete,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from danlu.core.errors import SpecError
from danlu.core.metric_record import RecordError, check_record
from danlu.core.state import JobState
from danlu.core.values import MAX_INT
from danlu.server.db.models import Job, JobMetric, JobMetricKey
from danlu.server.errors import ConflictError
from danlu.server.services import observe
from danlu.server.services.common import delete_some, lock_row, resolve_now
from danlu.server.services.retention import DAY
from danlu.server.services.settled import settled_only

MAX_BATCH = 1000
ROLLBACK: Final = "rollback"
"""The record field naming its rollback generation within its attempt (an integer >= 0;
absent: the attempt's latest so far): stored apart from the record's values."""
MAX_ROLLBACK: Final = 2**31 - 1
"""The largest rollback generation taken (the column's range)."""
MAX_READ = 10_000
"""The most records a page of :func:`list_metrics` holds (the largest ``limit``)."""
MAX_ID: Final = 2**63 - 1
"""The largest record id (the column's range): the largest of a :class:`StepPosition`."""
KEY_HEADER: Final = "Idempotency-Key"
"""The request header naming a metrics POST (:func:`check_key`)."""
MAX_KEY: Final = 128
"""The longest ``Idempotency-Key`` taken (the column's width)."""
KEY_DAYS: Final = 1.0
"""Days a job remembers a key: a resend later than that is stored again (the reporter
sends again at its next flush, seconds later, or after an outage of the API)."""
_KEY = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_KEY}}}")


def check_key(key: str) -> str:
    """``key`` when it can be an ``Idempotency-Key`` (1 to :data:`MAX_KEY` ASCII letters,
    digits, ``.``, ``_``, ``:`` or ``-``: a UUID, a hex or base64url id), else a
    :class:`SpecError` naming the header."""
    if _KEY.fullmatch(key) is None:
        shown = repr(key[:40]) + ("..." if len(key) > 40 else "")
        raise SpecError(
            KEY_HEADER,
            f"{shown} ({len(key)} characters) is not an idempotency key: send 1 to at most "
            f"{MAX_KEY} ASCII letters, digits, '.', '_', ':' or '-' (a random id such as a "
            "UUID, new for each request and the same when the same records are sent again), "
            "or no header",
        )
    return key


def repeated(session: Session, job_id: str, key: str, t: float) -> int | None:
    """The number of records the job stored for a request with ``key``; ``None`` when it
    stored none with that key, or stored it more than :data:`KEY_DAYS` before ``t`` (a key
    that old is forgotten, whether or not :func:`_remember` deleted it yet)."""
    query = select(JobMetricKey.accepted).where(
        JobMetricKey.job_id == job_id,
        JobMetricKey.key == key,
        JobMetricKey.created_at >= t - KEY_DAYS * DAY,
    )
    return session.scalar(query)


def _remember(session: Session, job_id: str, key: str, accepted: int, t: float) -> int | None:
    """Store ``key`` for the job (its keys older than :data:`KEY_DAYS` deleted first);
    ``None`` when stored, else the count of the request that stored it meanwhile (the unique
    (job, key) refused this one: answered as the repeat it is)."""
    session.execute(
        delete(JobMetricKey)
        .where(JobMetricKey.job_id == job_id, JobMetricKey.created_at < t - KEY_DAYS * DAY)
        .execution_options(synchronize_session=False)
    )
    try:
        with session.begin_nested():  # a refused insert leaves the transaction usable
            session.add(JobMetricKey(job_id=job_id, key=key, created_at=t, accepted=accepted))
    except IntegrityError:
        # the row that refused it is committed (a unique violation waits for its commit)
        return repeated(session, job_id, key, t) or 0
    return None


def forget_keys(session: Session, now: float | None, limit: int) -> int:
    """Delete at most ``limit`` keys stored more than :data:`KEY_DAYS` before ``now``, of any
    job (:func:`_remember` deletes a job's own only when it reports again: a finished job's
    last day of keys stayed for good); returns how many (``limit``: call again, there may be
    more)."""
    cutoff = resolve_now(now) - KEY_DAYS * DAY
    return delete_some(session, JobMetricKey, JobMetricKey.created_at < cutoff, limit)


def _rollback_of(record: Any, where: str) -> tuple[Any, int | None]:
    """``record`` without its :data:`ROLLBACK` field, and that field (``None`` when absent or
    null); a :class:`SpecError` naming ``<where>.rollback`` when it is not a whole number
    from 0 to :data:`MAX_ROLLBACK`. A record that is not an object is returned as it is (its
    check names it)."""
    if not isinstance(record, Mapping) or ROLLBACK not in record:
        return record, None
    value = record[ROLLBACK]
    rest = {k: v for k, v in record.items() if k != ROLLBACK}
    if value is None:
        return rest, None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ROLLBACK:
        shown = repr(value) if isinstance(value, (bool, int, float)) else type(value).__name__
        raise SpecError(
            f"{where}.{ROLLBACK}",
            f"{shown[:40]} is not a rollback generation: send a whole number from 0 to "
            f"{MAX_ROLLBACK} (0 for the first try's records, 1 for the replay's after a "
            "rollback to a checkpoint, 2 after a second, ...), or leave the field out",
        )
    return rest, value


def reporting_attempt(job: Job, run_token: bool) -> int:
    """The attempt whose run reports records for ``job`` now (read with the job's row
    locked): with the token of the job's run (``run_token``), the run that holds the job's
    only live run token. That is the run of the job's current attempt, except while a move
    (:func:`~danlu.server.services.jobs.resize`) is under way: the job is at its new attempt
    from the decision on, but the new run's token is issued only at its launch, once the
    old run (``moved_from``) has exited, and until then the old run, checkpointing within
    its grace, is the one reporting. A user's token reports for the job's current attempt."""
    if run_token and job.moved_from is not None:
        return job.moved_from
    return job.attempt


def ingest(
    session: Session,
    job: Job,
    records: Sequence[Mapping[str, Any]],
    now: float | None = None,
    key: str | None = None,
    *,
    run_token: bool = False,
) -> int:
    """Store ``records`` for ``job``; each needs an integer ``step`` (>= 0) and may carry a
    ``time`` (POSIX seconds; absent or null: now) and flat scalar values
    (:func:`~danlu.core.metric_record.check_record`, which danlu.train's reporter runs
    too). One record that fails refuses the whole batch (:class:`SpecError` naming
    ``metrics.<i>``): nothing of it is stored. A ``checkpoint_step`` value
    updates the job's last checkpoint; while the job holds GPUs, the step times and the
    rest of danlu.train's record update its measurement (see
    :mod:`~danlu.server.services.observe`). Returns the number stored.

    A job the retention purged takes no more records (:class:`ConflictError`: nothing
    would ever delete them). The job's row is locked first (read again,
    :func:`~danlu.server.services.common.lock_row`), as the purge locks it before it
    deletes (:func:`~danlu.server.services.retention.purged`): a purge that comes meanwhile
    waits and deletes these records too, and a report that comes during a purge waits and
    is refused.

    With ``key`` (the request's ``Idempotency-Key``, :func:`check_key`), a request the job
    stored under that key already (within :data:`KEY_DAYS`) returns the count stored then
    and stores nothing; else the key is stored with the records. The job's row is locked
    before the key is read, so of two requests with one key at once the second waits and
    reads the first's key; the unique (job, key) is the backstop (:func:`_remember`).

    Each record is stored with the attempt of the run reporting it
    (:func:`reporting_attempt`; ``run_token``: the request carries the token of the job's
    run, ``DANLU_TOKEN``); a finished job's, with the attempt of its last run that reported
    (:func:`_finished_attempt`): records added after the end supersede none of the job's.
    A record's ``rollback`` (:data:`ROLLBACK`, an integer >= 0, else a :class:`SpecError`
    naming ``metrics.<i>.rollback``) is stored as its generation within that attempt; a
    record without it, as the attempt's latest generation so far (0 before any rollback)."""
    t = resolve_now(now)
    if key is not None:
        check_key(key)
    if len(records) > MAX_BATCH:
        raise SpecError("metrics", f"at most {MAX_BATCH} records per request")
    job = lock_row(session, Job, job.id)
    if job.purged_at is not None:
        raise ConflictError(
            f"job {job.id}: its metric records were deleted by the retention "
            f"(DANLU_RETENTION_DAYS) at {job.purged_at:.0f}; it takes no new ones"
        )
    if key is not None:
        done = repeated(session, job.id, key, t)
        if done is not None:
            return done
    last = job.last_step
    checkpoint = job.checkpoint_step
    if JobState(job.state).terminal:
        attempt = _finished_attempt(session, job.id, job.attempt)
    else:
        attempt = reporting_attempt(job, run_token)
    rows = []
    stored_latest: int | None = None  # the attempt's latest rollback generation, read once
    batch_latest = 0  # the latest of this request's records so far
    for i, record in enumerate(records):
        record_values, rollback = _rollback_of(record, f"metrics.{i}")
        try:
            checked = check_record(record_values, f"metrics.{i}", t)
        except RecordError as exc:  # a plain SpecError: its class is the 422's error type
            raise SpecError(exc.field, exc.message) from None
        if rollback is None:  # the attempt's latest generation so far
            if stored_latest is None:
                firsts = _generation_firsts(session, job.id)
                stored_latest = max((r for a, r, _ in firsts if a == attempt), default=0)
            rollback = max(stored_latest, batch_latest)
        batch_latest = max(batch_latest, rollback)
        ckpt = checked.data.get("checkpoint_step")
        if isinstance(ckpt, int) and not isinstance(ckpt, bool):
            checkpoint = max(checkpoint or 0, ckpt)
        last = checked.step if last is None else max(last, checked.step)
        rows.append(
            JobMetric(
                job_id=job.id,
                step=checked.step,
                time=checked.time,
                data=checked.data,
                attempt=attempt,
                rollback=rollback or None,  # null for 0, as the records stored before
            )
        )
    if key is not None:
        done = _remember(session, job.id, key, len(rows), t)
        if done is not None:
            return done
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


def _finished_attempt(session: Session, job_id: str, current: int) -> int:
    """The attempt the records added to a finished job are stored as: the last one that
    reported (0 for records stored before attempts were kept; ``current``, the job's
    attempt, when it has none). Never a later one: a job requeued and then cancelled or
    failed before its new run reported ends at an attempt with no records, and a record
    stored as it (an eval of a saved checkpoint, at a step below the last) superseded every
    record of the runs before from its step on, hiding what the job had shown."""
    reported = session.scalar(select(func.max(JobMetric.attempt)).where(JobMetric.job_id == job_id))
    if reported is not None:
        return int(reported)
    any_record = select(JobMetric.id).where(JobMetric.job_id == job_id).limit(1)
    return 0 if session.scalar(any_record) is not None else current


def _raise_to(column: Any, value: int) -> Any:
    return case((column.is_(None), value), (column < value, value), else_=column)


@dataclass(frozen=True)
class Supersession:
    """Which of a job's records a later attempt, or a later rollback generation of their
    attempt, went back over (:func:`supersession`).

    A record's key is its ``(attempt, rollback)`` pair (0 for either when null), ordered as
    tuples. ``bounds``: ``(attempt, rollback, step)`` triples, by key: a record whose key is
    below the triple's ``(attempt, rollback)`` and not below the previous triple's is
    superseded from ``step`` on, the smallest step reported under that key or a later one.
    The steps only grow along the triples (each is a minimum over fewer keys than the one
    before), and triples of one step are merged into the one of the higher key. Records of
    the job's last key are below no triple: never superseded."""

    bounds: tuple[tuple[int, int, int], ...] = ()

    def superseded(self, attempt: int | None, step: int, rollback: int | None = None) -> bool:
        """Whether a record of ``attempt`` (None: stored before attempts, attempt 0) and
        rollback generation ``rollback`` (None: 0) at ``step`` is superseded."""
        at = bisect.bisect_right(self.bounds, (attempt or 0, rollback or 0, math.inf))
        return at < len(self.bounds) and step >= self.bounds[at][2]

    def clause(self) -> ColumnElement[bool] | None:
        """The SQL condition of a record that is *not* superseded; None when none is. Its
        numbers are written into the statement (as many as the job has bounds; no bound
        parameters, of which SQLite takes a limited number)."""
        if not self.bounds:
            return None

        def number(value: int) -> Any:
            return literal(value, literal_execute=True)

        attempt = func.coalesce(JobMetric.attempt, 0)
        rollback = func.coalesce(JobMetric.rollback, 0)
        whens: list[tuple[ColumnElement[bool], Any]] = []
        for a, r, s in self.bounds:
            below = attempt < number(a)  # the key (attempt, rollback) below (a, r)
            if r > 0:
                below = or_(below, and_(attempt == number(a), rollback < number(r)))
            whens.append((below, number(s)))
        since = case(*whens, else_=number(MAX_INT + 1))  # beyond every step
        return JobMetric.step < since


def supersession(session: Session, job_id: str) -> Supersession:
    """Which of the job's records are superseded: from each attempt's first (smallest) step,
    read with two index seeks an attempt (``ix_job_metrics_job_id_attempt_step``), not a
    scan of the job's records, and each rollback generation's (:func:`_generation_firsts`)."""
    return supersession_of(_first_steps(session, job_id), _generation_firsts(session, job_id))


def supersession_of(
    first_steps: Sequence[tuple[int, int]],
    generations: Sequence[tuple[int, int, int]] = (),
) -> Supersession:
    """:class:`Supersession` from ``(attempt, smallest step)`` of each attempt from 1 on that
    reported a record, by attempt (what :func:`supersession` reads, or what a reader of
    all the records found), and ``(attempt, rollback, smallest step)`` of each rollback
    generation from 1 on that reported one (:func:`_generation_firsts`; none: the records are
    told apart by attempt alone)."""
    firsts: dict[tuple[int, int], int] = {(a, 0): s for a, s in first_steps}
    for a, r, s in generations:
        firsts[a, r] = min(s, firsts.get((a, r), s))
    bounds: list[tuple[int, int, int]] = []  # by key, from the last
    lowest: int | None = None  # the smallest first step of this key and those after
    for (attempt, rollback), step in sorted(firsts.items(), reverse=True):
        lowest = step if lowest is None else min(lowest, step)
        if not bounds or bounds[-1][2] != lowest:  # else the later bound covers these too
            bounds.append((attempt, rollback, lowest))
    return Supersession(tuple(reversed(bounds)))


def _generation_firsts(session: Session, job_id: str) -> list[tuple[int, int, int]]:
    """``(attempt, rollback, smallest step)`` of each rollback generation from 1 on that
    reported a record of the job, by attempt then generation: index seeks
    (``ix_job_metrics_job_id_rollback``), two for each generation and one more, and two for
    each of its attempts; a single seek for a job that never rolled back."""
    found: list[tuple[int, int, int]] = []
    rollback = 0
    mine = JobMetric.job_id == job_id
    while True:
        following = session.scalar(
            select(func.min(JobMetric.rollback)).where(mine, JobMetric.rollback > rollback)
        )
        if following is None:
            break
        rollback = int(following)
        attempt = -1
        while True:
            at = JobMetric.rollback == rollback
            next_attempt = session.scalar(
                select(func.min(JobMetric.attempt)).where(mine, at, JobMetric.attempt > attempt)
            )
            if next_attempt is None:
                break
            attempt = int(next_attempt)
            step = session.scalar(
                select(func.min(JobMetric.step)).where(mine, at, JobMetric.attempt == attempt)
            )
            found.append((attempt, rollback, int(step or 0)))
    return sorted(found)


_SEEK = JobMetric.__table__.alias("seek")
_FIRST = JobMetric.__table__.alias("first")
"""The job's records again, for :func:`_first_steps`' correlated seeks (made once: an alias
costs more to build than the query costs to run)."""


def _first_steps(session: Session, job_id: str) -> list[tuple[int, int]]:
    """``(attempt, smallest step)`` of each of the job's attempts from 1 on that reported a
    record, by attempt. A loose index scan in one statement: a recursive query finds each
    next attempt by a seek (the smallest attempt above the last found), and each its
    smallest step by another; records of attempt 0 or none are before them all, and what
    their first step is does not matter."""
    found = (
        select(func.min(JobMetric.attempt).label("attempt"))
        .where(JobMetric.job_id == job_id, JobMetric.attempt > 0)
        .cte("attempts", recursive=True)
    )
    following = (
        select(func.min(_SEEK.c.attempt))
        .where(_SEEK.c.job_id == job_id, _SEEK.c.attempt > found.c.attempt)
        .scalar_subquery()
    )
    found = found.union_all(select(following).where(found.c.attempt.is_not(None)))
    first_step = (
        select(func.min(_FIRST.c.step))
        .where(_FIRST.c.job_id == job_id, _FIRST.c.attempt == found.c.attempt)
        .scalar_subquery()
    )
    query = select(found.c.attempt, first_step).where(found.c.attempt.is_not(None))
    return [(int(a), int(s)) for a, s in session.execute(query.order_by(found.c.attempt))]


@dataclass(frozen=True, order=True)
class StepPosition:
    """Where a page of records by step ended: the records after it are those of a later
    step and those of ``step`` stored after record ``id`` (a step's records are in the order
    they came, by id). ``GET /jobs/{id}/metrics`` sends it as ``X-Danlu-Metrics-Next``
    (:meth:`text`) and reads it back as ``next`` (:func:`step_position`).

    Why: a page holds at most :data:`MAX_READ` records, so the records of a step of more
    end a page inside that step, and the next page read with ``after_step`` = that step
    skipped the rest of it. A position goes on inside the step.

    Why ids order a step's records on PostgreSQL too, where an id is taken at insert, not
    at commit (the records by arrival are read up to a settled id for that,
    :func:`~danlu.server.services.settled.settled_id`): every page by step holds only the
    records up to the job's newest settled id when it was read (``through_id``, the
    :func:`cursor` read first), so every record of a step with an id below the page's last
    had committed (or never will) before the page was read, and is in it or before it. A
    record that commits after the page was read at a step it passed (an eval of an earlier
    step, a restarted run's) comes by arrival after the page's cursor, as before."""

    step: int
    id: int

    def text(self) -> str:
        """The position as ``X-Danlu-Metrics-Next`` writes it: ``STEP.ID``."""
        return f"{self.step}.{self.id}"

    def clause(self) -> ColumnElement[bool]:
        """The SQL condition of a record after the position (its bound on the step first:
        an index range on ``(job_id, step)``)."""
        return and_(
            JobMetric.step >= self.step,
            or_(JobMetric.step > self.step, JobMetric.id > self.id),
        )


_POSITION = re.compile(r"([0-9]{1,19})\.([0-9]{1,19})")


def step_position(text: str) -> StepPosition:
    """The :class:`StepPosition` ``text`` writes (``STEP.ID``: what ``X-Danlu-Metrics-Next``
    said); a :class:`SpecError` naming ``next`` when it is not one."""
    found = _POSITION.fullmatch(text)
    if found is not None:
        step, ident = int(found[1]), int(found[2])
        if step <= MAX_INT + 1 and ident <= MAX_ID:
            return StepPosition(step, ident)
    shown = repr(text[:40]) + ("..." if len(text) > 40 else "")
    raise SpecError(
        "next",
        f"{shown} is not a position of a job's records: pass the X-Danlu-Metrics-Next "
        "header of the page before as it is, or leave next out for the first page",
    )


def next_position(
    rows: Sequence[JobMetric], after_step: int = -1, after: StepPosition | None = None
) -> StepPosition:
    """The position after a page by step (:func:`list_metrics`' ``rows``, read with
    ``after_step`` and ``after``): after its last record, or where it began when it holds
    none (the records of a step above ``after_step``, and after ``after``)."""
    if rows:
        return StepPosition(rows[-1].step, rows[-1].id)
    begun = StepPosition(after_step + 1, 0)  # ids start at 1: every record of a later step
    return begun if after is None else max(begun, after)


def list_metrics(
    session: Session,
    job_id: str,
    *,
    after_step: int = -1,
    limit: int = 1000,
    tail: bool = False,
    after_id: int | None = None,
    superseded: bool = False,
    through_id: int | None = None,
    after: StepPosition | None = None,
) -> list[JobMetric]:
    """A job's metric records with ``step > after_step``, by step then arrival: the first
    ``limit`` of them, or with ``tail`` the last ``limit``; those a later attempt went back
    over left out (:class:`Supersession`) unless ``superseded``. With ``after_id`` (a
    cursor, :func:`cursor`), every record stored after it, superseded or not, in the order
    they came (whatever their step: a restarted run reports earlier steps again, and a
    follower sees them as they come). With ``through_id`` only the records up to that id
    (the :func:`cursor` read before them: the page and the cursor tell of the same records).
    With ``after`` (a :class:`StepPosition`, :func:`next_position` of the page before), only
    the records after it: the next page by step, also inside a step; not with ``tail`` or
    ``after_id`` (a :class:`SpecError` naming ``next``).

    The first ``limit`` by step never end inside a step (:func:`_whole_steps`): the next page
    read with ``after_step`` = the last step of this one would skip the rest of a step cut
    off. A page holds at most :data:`MAX_READ` records, even of one step: a step of more is
    read on with ``after``."""
    if not 1 <= limit <= MAX_READ:
        raise SpecError("limit", f"must be between 1 and {MAX_READ}")
    if after is not None and (tail or after_id is not None):
        given = "tail=true" if tail else "after_id"
        raise SpecError(
            "next",
            "a position of the pages by step, which go forward from the first step: "
            f"not with {given} (leave out one of them)",
        )
    query = select(JobMetric).where(JobMetric.job_id == job_id, JobMetric.step > after_step)
    if through_id is not None:
        query = query.where(JobMetric.id <= through_id)
    if after_id is not None:
        # none that a record committing late could come before
        query = settled_only(session, query.where(JobMetric.id > after_id), JobMetric)
        if tail:
            latest = query.order_by(JobMetric.id.desc()).limit(limit)
            return list(reversed(list(session.scalars(latest))))
        return list(session.scalars(query.order_by(JobMetric.id).limit(limit)))
    if after is not None:
        query = query.where(after.clause())
    shown = None if superseded else supersession(session, job_id).clause()
    if shown is not None:
        query = query.where(shown)
    if tail:
        latest = query.order_by(JobMetric.step.desc(), JobMetric.id.desc()).limit(limit)
        return list(reversed(list(session.scalars(latest))))
    first = list(session.scalars(query.order_by(JobMetric.step, JobMetric.id).limit(limit + 1)))
    return _whole_steps(session, query, first, limit)


def _whole_steps(
    session: Session, query: Select[JobMetric], first: list[JobMetric], limit: int
) -> list[JobMetric]:
    """The first ``limit`` records of ``query`` (``first``: its first ``limit + 1`` by step
    then id), without those of the step the limit cuts: they come whole in the next page.
    When that step is the page's only one (it alone has more than ``limit`` records), all of
    its records instead, up to :data:`MAX_READ` (the largest page): a page never ends inside
    a step of at most that many records, so none is lost to a reader paging with
    ``after_step``. A step of more (a run reporting one step over and over, many ranks' or
    metrics' records) had every record in one reply, however many: its first
    :data:`MAX_READ` come, and the next page goes on inside it (``after``, a
    :class:`StepPosition`)."""
    if len(first) <= limit:
        return first
    page, cut = first[:limit], first[limit].step
    if page[-1].step != cut:
        return page
    whole = [row for row in page if row.step != cut]
    if whole or limit >= MAX_READ:
        return whole or page
    rest = query.where(JobMetric.step == cut, JobMetric.id > page[-1].id)
    more = rest.order_by(JobMetric.id).limit(MAX_READ - limit)
    return page + list(session.scalars(more))


@dataclass(frozen=True)
class MetricsPage:
    """A page of a job's records (:func:`read_page`), with the headers that read on from it."""

    rows: list[JobMetric]
    cursor: int
    """The ``after_id`` of the records stored after these (``X-Danlu-Metrics-Cursor``)."""
    following: StepPosition | None
    """The position after the page, of a page by step (``X-Danlu-Metrics-Next``); None of a
    page by arrival (``after_id``)."""


def read_page(
    session: Session,
    job_id: str,
    *,
    after_step: int = -1,
    limit: int = 1000,
    tail: bool = False,
    after_id: int | None = None,
    superseded: bool = False,
    after: StepPosition | None = None,
) -> MetricsPage:
    """A page of :func:`list_metrics` as ``GET /jobs/{id}/metrics`` answers it. A page by
    step reads the job's :func:`cursor` first and holds only the records up to it: on
    PostgreSQL each statement reads what is committed when it starts, and a cursor read
    after the records would pass over those stored in between; and every record up to the
    cursor is settled, so none with an id below the page's last can commit after the page
    was read (its position goes on after the page's last id, :class:`StepPosition`). A page
    by arrival (``after_id``) reads settled records only itself; its cursor is its last id
    (``after_id`` when it holds none)."""
    newest = cursor(session, job_id) if after_id is None else None
    rows = list_metrics(
        session,
        job_id,
        after_step=after_step,
        limit=limit,
        tail=tail,
        after_id=after_id,
        superseded=superseded,
        through_id=newest,
        after=after,
    )
    if newest is None:
        return MetricsPage(rows, max((m.id for m in rows), default=after_id or 0), None)
    return MetricsPage(rows, newest, next_position(rows, after_step, after))


def cursor(session: Session, job_id: str) -> int:
    """The job's newest settled record id (0 when it has none): ``after_id`` for the
    records stored from now on (none above it can still commit with a lower id:
    :func:`~danlu.server.services.settled.settled_id`)."""
    query = select(func.max(JobMetric.id)).where(JobMetric.job_id == job_id)
    newest = session.scalar(settled_only(session, query, JobMetric))
    return int(newest or 0)
