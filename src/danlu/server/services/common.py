"""Small helpers shared by the services."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, Executable

IN_CHUNK = 500
"""Values per ``IN (...)`` list when the services read rows by many keys (SQLite caps a
statement's parameters; PostgreSQL plans long lists slowly)."""


def tuple_rows(connection: Connection, statement: Executable) -> list[tuple[Any, ...]]:
    """The rows of ``statement`` as plain tuples: they compare and hash in C (a Core ``Row``
    compares in Python, ~20 x slower as a cache key or in ``==``)."""
    return list(map(tuple, connection.execute(statement).all()))


def resolve_now(now: float | None) -> float:
    """``now`` if given, else the wall clock (POSIX seconds)."""
    return time.time() if now is None else float(now)
