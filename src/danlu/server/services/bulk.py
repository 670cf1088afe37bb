"""Write many changed job rows at once, with the same optimistic version guard as the ORM,
many job events in one INSERT (:class:`EventBatch`), and many waiting reasons in one UPDATE
(:class:`WaitingReasons`).

The ORM writes every versioned row with its own ``UPDATE ... WHERE seq = ? AND version = ?``
and checks each row count, so a scheduling round that preempts and starts ~3,000 jobs sends
~3,000 statements, one round trip each (~0.6 ms on a local PostgreSQL: seconds in all).
:func:`flush_jobs` sends one executemany UPDATE per set of changed columns instead (psycopg
pipelines its statements), checks the summed row count, and marks the objects clean, so the
ORM's flush that follows writes only what else the session holds (the events).
:func:`danlu.server.services.jobs.flush_or_conflict` calls it on the session's changed jobs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import bindparam, insert, inspect, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.state import InstanceState

from danlu.core.state import JobState
from danlu.server.db.models import Base, Job, JobEvent, JobRun
from danlu.server.errors import ConflictError
from danlu.server.services import webhooks

_TABLE = Base.metadata.tables[Job.__tablename__]
_COLUMNS = frozenset(attr.key for attr in inspect(Job).column_attrs) - {"seq", "version"}
"""The job attributes :func:`flush_jobs` writes (the key and the version are its own)."""
_ATTRIBUTES = frozenset(inspect(Job).attrs.keys())
"""Every mapped attribute, relationships included: a job with any other change is left to
the ORM's flush (it writes foreign keys from relationships, which this does not)."""


def flush_jobs(session: Session, jobs: Iterable[Job]) -> int:
    """Write the changed columns of ``jobs`` (persistent rows of ``session``) in one
    executemany UPDATE per set of changed columns, each row guarded by its version and
    bumping it, as the ORM's flush would; then the objects are clean. Returns the rows
    written. A row whose version moved since it was loaded is a :class:`ConflictError`
    (the caller rolls back), as with :func:`danlu.server.services.jobs.flush_or_conflict`.

    Only plain column changes are written here: a job with a change this function cannot
    write (an expired or never-flushed object, a changed relationship or version) is left
    to the ORM's flush."""
    groups: dict[frozenset[str], list[tuple[Job, InstanceState[Job]]]] = {}
    for job in jobs:
        state = inspect(job)
        if not state.persistent or not state.modified or state.expired_attributes:
            continue
        changed = _ATTRIBUTES - state.unmodified
        if changed and changed <= _COLUMNS:  # a relationship or the version: the ORM's
            groups.setdefault(frozenset(changed), []).append((job, state))
    connection = session.connection()
    written = 0
    for changed, group in groups.items():
        keys = sorted(changed)
        statement = (
            update(_TABLE)
            .where(_TABLE.c.seq == bindparam("k_seq"), _TABLE.c.version == bindparam("k_old"))
            .values(
                {
                    **{key: bindparam(f"v_{key}", type_=_TABLE.c[key].type) for key in keys},
                    "version": bindparam("k_new"),
                }
            )
        )
        names = [(f"v_{key}", key) for key in keys]
        rows: list[dict[str, Any]] = []
        for _, state in group:
            values = state.dict  # the current values (what the attributes' getters return)
            row = {name: values[key] for name, key in names}
            version = values["version"]
            row.update(k_seq=values["seq"], k_old=version, k_new=version + 1)
            rows.append(row)
        result = connection.execute(statement, rows)
        if result.rowcount != len(rows):
            raise ConflictError("a job of this change changed concurrently; retry")
        for (job, state), row in zip(group, rows, strict=True):
            set_committed_value(job, "version", row["k_new"])
            _mark_clean(session, state)
        written += len(rows)
    return written


def _mark_clean(session: Session, state: InstanceState[Job]) -> None:
    """What the ORM does to an object after flushing it: its values become the committed
    ones and it leaves the session's dirty set, so the next flush does not diff it again
    (~30 attribute histories per job, ~1 s for 3,000 jobs). SQLAlchemy has no public call for
    it; the tests check that a written job is no longer in ``Session.dirty``."""
    state._commit_all(state.dict, session.identity_map)


_EVENTS = Base.metadata.tables[JobEvent.__tablename__]
_RUNS = Base.metadata.tables[JobRun.__tablename__]


class EventBatch:
    """Job events collected by a caller that changes many jobs in one transaction, written
    with one executemany INSERT (:meth:`write`). An ORM :class:`JobEvent` object each costs
    its construction and the unit of work's bookkeeping: ~0.1 s for the ~1,800 state changes
    of a round that reshuffles a 1,000-node cluster. The rows get their ids in the order
    added, as the ORM's flush would give them."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        """:class:`~danlu.server.db.models.JobRun` rows: the stretches on GPUs the
        round's changes end, written with the events."""

    def add(self, job_id: str, time: float, old: str | None, new: str, reason: str) -> None:
        """One event: ``job_id`` went from ``old`` to ``new`` at ``time``, for ``reason``."""
        self.rows.append({"job_id": job_id, "time": time, "old": old, "new": new, "reason": reason})

    def add_run(self, run: dict[str, Any]) -> None:
        """One ended stretch of a job on its GPUs (a :class:`JobRun` row's columns)."""
        self.runs.append(run)

    def write(self, session: Session) -> int:
        """Insert the events (and ended stretches) added since the last write on the
        session's connection (after the job rows they belong to were flushed); returns how
        many events."""
        count = len(self.rows)
        connection = session.connection()
        if count:
            connection.execute(insert(_EVENTS), self.rows)
            webhooks.enqueue(session, self.rows)
            self.rows = []
        if self.runs:
            connection.execute(insert(_RUNS), self.runs)
            self.runs = []
        return count


_PENDING = JobState.PENDING.value


class WaitingReasons:
    """New waiting reasons of pending jobs, written in one executemany UPDATE that leaves the
    rows' ``version`` alone, as the round's shared reason is written (a reason is advice to
    users, not state: it is not what a concurrent change is guarded on, and a job whose
    version moved has its scheduling status rebuilt in the next snapshot, ~60 us each; a
    round that defers ~1,800 starts would rebuild them all). Only rows still PENDING and at
    the version the session holds are written: a job cancelled meanwhile keeps its reason
    and the round is not lost, and one whose row another transaction changed since it was
    read (a hold, a disable of its owner: each writes its own reason) keeps that one."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[Job, str]] = {}

    def add(self, job: Job, reason: str) -> None:
        """``job`` (a row of the session) now waits for ``reason``; the last one added wins
        (one equal to the stored reason leaves nothing to write)."""
        if job.pending_reason != reason:
            self._rows[job.seq] = (job, reason)
        else:
            self._rows.pop(job.seq, None)

    def write(self, session: Session) -> int:
        """Write the reasons added since the last write; the objects take them as their
        committed values (not a change for the ORM to flush). Returns how many."""
        rows = [
            {"k_seq": seq, "k_version": job.version, "v_reason": reason}
            for seq, (job, reason) in self._rows.items()
        ]
        if rows:
            statement = (
                update(_TABLE)
                .where(
                    _TABLE.c.seq == bindparam("k_seq"),
                    _TABLE.c.state == _PENDING,
                    _TABLE.c.version == bindparam("k_version"),
                )
                .values(pending_reason=bindparam("v_reason"))
            )
            session.connection().execute(statement, rows)
            for job, reason in self._rows.values():
                set_committed_value(job, "pending_reason", reason)
            self._rows = {}
        return len(rows)
