"""Reading a history page by page: a user's (:mod:`~danlu.server.services.user_events`)
and a node's (:mod:`~danlu.server.services.node_events`) events are read alike, after the
last id seen, the oldest or the newest few."""

from __future__ import annotations

from typing import Final, TypeVar

from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute, Session

from danlu.core.errors import SpecError

MAX_EVENTS: Final = 1000
"""The most events one read returns."""

Row = TypeVar("Row")


def page(
    session: Session,
    query: Select[Row],
    id_column: InstrumentedAttribute[int],
    *,
    after_id: int = 0,
    limit: int = 100,
    tail: bool = False,
) -> list[Row]:
    """The rows of ``query`` (one history's events) with ``id_column > after_id``, oldest
    first; at most ``limit`` (1 to :data:`MAX_EVENTS`, else a :class:`SpecError` on
    ``limit``): the oldest such, or with ``tail`` the newest (in order too)."""
    if not 1 <= limit <= MAX_EVENTS:
        raise SpecError("limit", f"must be between 1 and {MAX_EVENTS}")
    order = id_column.desc() if tail else id_column
    query = query.where(id_column > after_id).order_by(order).limit(limit)
    rows = list(session.scalars(query))
    if tail:
        rows.reverse()
    return rows
