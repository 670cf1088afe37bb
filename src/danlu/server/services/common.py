"""Small helpers shared by the services."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Connection, Executable, delete, select
from sqlalchemy.orm import Session

from danlu.core.errors import SpecError
from danlu.core.state import JobState
from danlu.server.db.models import (
    ApiToken,
    Job,
    JobMetricKey,
    Project,
    Sweep,
    User,
    UserEvent,
    Webhook,
)
from danlu.server.errors import ConflictError, NotFoundError, PermissionDenied

IN_CHUNK = 500
"""Values per ``IN (...)`` list when the services read rows by many keys (SQLite caps a
statement's parameters; PostgreSQL plans long lists slowly)."""


def tuple_rows(connection: Connection, statement: Executable) -> list[tuple[Any, ...]]:
    """The rows of ``statement`` as plain tuples: they compare and hash in C (a Core ``Row``
    compares in Python, ~20 x slower as a cache key or in ``==``)."""
    return list(map(tuple, connection.execute(statement).all()))


def plain_rows(connection: Connection, statement: Executable) -> list[tuple[Any, ...]]:
    """:func:`tuple_rows` for a query whose columns need no conversion from what the driver
    returns (integers, floats, strings: not booleans, which SQLite stores as integers, nor
    JSON): the driver's own tuples, fetched from its cursor without making a ``Row`` of each
    (12,000 key rows a scheduling round: ~15 -> ~10 ms on SQLite). The statement still runs
    through the connection (its cached compilation, its events)."""
    result = connection.execute(statement)
    try:
        return list(result.cursor.fetchall())
    finally:
        result.close()


def state_values(
    states: Iterable[JobState | str],
    allowed: Sequence[str] = tuple(JobState),
    kind: str = "job",
) -> list[str]:
    """The stored values of ``states`` (names in any case) among ``allowed`` (a job's by
    default); :class:`SpecError` on ``state`` naming the valid ones for a name that is no
    ``kind`` state."""
    wanted = []
    for name in states:
        value = str(name).upper()
        if value not in allowed:
            valid = ", ".join(allowed)
            raise SpecError("state", f"{name!r} is not a {kind} state; use one of {valid}")
        wanted.append(value)
    return wanted


def resolve_now(now: float | None) -> float:
    """``now`` if given, else the wall clock (POSIX seconds)."""
    return time.time() if now is None else float(now)


def shown_time(t: float) -> str:
    """POSIX seconds ``t`` as an ISO 8601 UTC time (the seconds where past the calendar)."""
    try:
        return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError):
        return f"{t:g} s after 1970"


Named = TypeVar("Named", Job, Sweep, Webhook)

ID_PREFIX_LENGTHS = range(4, 12)
"""An id given with 4-11 characters may be a prefix of a full (12-character) id."""
AMBIGUOUS_NAMED = 3
"""The most of the ids an ambiguous prefix matched that its error names."""


def by_id(
    session: Session, model: type[Named], kind: str, key: str, viewer: User | None = None
) -> Named:
    """The row of ``model`` whose ``id`` is ``key``, or whose id starts with it when it is a
    unique prefix of 4+ characters. :class:`NotFoundError` (``kind`` names the thing) when
    none is, :class:`ConflictError` when the prefix is ambiguous, :class:`PermissionDenied`
    when a non-admin ``viewer`` does not own it. A prefix is looked up among the rows a
    non-admin ``viewer`` owns only: matched against everyone's, it named other users' full
    ids in its 403 and made the viewer's own unique prefix ambiguous. The 409 names the
    ids the prefix matched (:data:`AMBIGUOUS_NAMED` at most), all of them the viewer's to
    see. A viewer is only given for a model whose ``user_id`` is its owner (a job, a
    sweep): a webhook's is the user it is told of, and webhooks are an admin's."""
    row = session.scalar(select(model).where(model.id == key))
    if row is None and len(key) in ID_PREFIX_LENGTHS:
        query = select(model).where(model.id.startswith(key, autoescape=True))
        if viewer is not None and not viewer.is_admin:
            query = query.where(model.user_id == viewer.id)
        found = list(session.scalars(query.order_by(model.id).limit(AMBIGUOUS_NAMED + 1)))
        if len(found) > 1:
            named = ", ".join(one.id for one in found[:AMBIGUOUS_NAMED])
            more = ", ..." if len(found) > AMBIGUOUS_NAMED else ""
            raise ConflictError(
                f"{kind} id prefix {key!r} is ambiguous ({named}{more}); give more characters"
            )
        row = found[0] if found else None
    if row is None:
        short = 0 < len(key) < ID_PREFIX_LENGTHS.start
        hint = f"an id prefix needs {ID_PREFIX_LENGTHS.start} characters or more" if short else ""
        raise NotFoundError(kind, key, hint=hint)
    if viewer is not None and not viewer.is_admin and row.user_id != viewer.id:
        raise PermissionDenied(f"{kind} {row.id} belongs to another user")
    return row


Lockable = TypeVar("Lockable", Job, Project, User)


def lock_row(session: Session, model: type[Lockable], key: Any) -> Lockable:
    """The row of ``model`` whose ``id`` is ``key``, read again (the session's copy
    refreshed, after its pending changes are flushed) with the row locked until the
    transaction ends: ``SELECT ... FOR NO KEY UPDATE`` on PostgreSQL. A transaction that
    reads what it will write (the row, or rows the row stands for: a user's jobs, a
    project's members) then waits for a concurrent one that does the same to commit, and
    starts from what that one wrote, instead of writing over it or losing an optimistic
    version race at its flush; rows that only refer to it (a job's events and metric
    records, a user's jobs) are still inserted meanwhile. Only the model's own row is
    locked (``FOR NO KEY UPDATE OF jobs``): a job loads its owner and project joined, and
    without ``OF`` PostgreSQL locked their rows too, so a job's cancel, hold or priority
    change made a submission by its owner, or a project's member change, wait. Code that
    needs a user's or project's rows serialised locks that row itself (``lock_row(session,
    User, ...)``). SQLite renders no lock: its writers are serialised anyway (every write
    transaction begins ``IMMEDIATE``). :class:`NotFoundError` when the row is gone."""
    query = (
        select(model)
        .where(model.id == key)
        .with_for_update(key_share=True, of=model)
        .execution_options(populate_existing=True)
    )
    row = session.scalar(query)
    if row is None:
        raise NotFoundError(model.__tablename__.rstrip("s"), str(key))
    return row


def delete_some(
    session: Session,
    model: type[ApiToken] | type[JobMetricKey] | type[UserEvent],
    condition: ColumnElement[bool],
    limit: int,
) -> int:
    """Delete at most ``limit`` rows of ``model`` meeting ``condition`` (a retention pass's
    batch: one statement's worth, so a backlog never holds the write lock for long);
    returns how many (``limit``: call again, there may be more)."""
    ids = list(session.scalars(select(model.id).where(condition).limit(limit)))
    if ids:
        session.execute(
            delete(model).where(model.id.in_(ids)).execution_options(synchronize_session=False)
        )
    return len(ids)
