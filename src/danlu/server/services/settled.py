"""Which rows of a table followed by id (job events, metric records) are settled: no row
with a lower id can still appear. :func:`settled_id`.

Why: on PostgreSQL an id is taken when a row is inserted, not when its transaction commits,
so row 101 can be visible while 100 is not yet; a follower asking for ``id > 101`` would
never see 100. Each transaction that inserts into such a table first holds a shared advisory
lock named after the highest id of the table handed out before its first insert, until it
ends (a trigger, migration 0031); every id it takes is above that."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import Select, text
from sqlalchemy.orm import Session

from danlu.server.db.models import JobEvent, JobMetric

_Query = TypeVar("_Query", bound=Select[*tuple[Any, ...]])

TAGS = {"job_events": 0x646C, "job_metrics": 0x646D}
"""The top 16 bits of each table's advisory lock key: ``tag << 48 | the highest id handed
out`` (equal to migration 0031's)."""

_LOWEST_IN_FLIGHT = text(
    "SELECT min(((classid::bigint & 65535) << 32) | objid::bigint) FROM pg_locks"
    " WHERE locktype = 'advisory' AND objsubid = 1 AND classid::bigint >> 16 = :tag"
    " AND pid <> pg_backend_pid()"
)
"""The lowest id an open transaction of *another* session may still commit rows above: a
transaction reading what it wrote itself sees its own rows, its own lock aside."""


def settled_id(session: Session, table: str) -> int | None:
    """The highest id of ``table`` (a key of :data:`TAGS`) at or below which every row has
    committed or never will; ``None`` on SQLite, whose writers take turns, so ids commit in
    order and every row visible is settled.

    The highest id handed out is read first, then the locks: an id at or below both was
    taken by a transaction that had ended by the second read (one still open holds a lock no
    higher than its ids), so a query of the caller's after this (READ COMMITTED: a fresh
    snapshot each statement) sees the row if it committed. A transaction that wrote a row
    and stays open holds every id above its first back until it ends."""
    if session.get_bind().dialect.name != "postgresql":
        return None
    handed_out = session.scalar(
        text(
            "SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END "
            f"FROM {table}_id_seq"
        )
    )
    in_flight = session.scalar(_LOWEST_IN_FLIGHT, {"tag": TAGS[table]})
    bound = int(handed_out or 0)
    return bound if in_flight is None else min(bound, int(in_flight))


def settled_only(
    session: Session, query: _Query, table: type[JobEvent] | type[JobMetric]
) -> _Query:
    """``query`` narrowed to the settled rows of ``table`` (ids at or below
    :func:`settled_id`); as it is on SQLite, where every visible row is settled."""
    bound = settled_id(session, table.__tablename__)
    return query if bound is None else query.where(table.id <= bound)
