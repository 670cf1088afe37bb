"""Alembic environment: runs on the connection handed over by ``upgrade_database``.

On SQLite the migrations run with foreign keys off. A batch migration recreates a table there
(copy it, ``DROP TABLE``, rename the copy), and with foreign keys on that ``DROP TABLE``
deletes every row referring to the table through ``ON DELETE CASCADE``: the jobs' events,
metrics, runs and energy, the nodes' GPUs. ``PRAGMA foreign_keys`` cannot change inside a
transaction, so :func:`_sqlite_foreign_keys_off` ends the caller's transaction first, runs the
migrations in one transaction of its own, checks the foreign keys before committing it, and
turns them back on (the connection goes back to its pool as the server expects it).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from alembic import context
from alembic.util import CommandError
from sqlalchemy import Connection

from danlu.core.errors import ConfigError
from danlu.server.db.engine import make_engine
from danlu.server.db.models import Base

config = context.config
target_metadata = Base.metadata

SHOWN_VIOLATIONS = 5


@contextmanager
def _sqlite_foreign_keys_off(connection: Connection) -> Iterator[None]:
    """Run the block (the migrations) with the foreign keys of ``connection`` off, in one
    transaction that commits when the block ends after ``PRAGMA foreign_key_check`` finds no
    row referring to a missing one (otherwise it rolls back and raises
    :class:`~alembic.util.CommandError` naming the rows).

    ``connection`` must be in a SQLAlchemy transaction (the caller's). Its work so far is
    committed before the block, and a new transaction is begun after it for the caller to
    commit or roll back: the migrations themselves are committed (or rolled back) here.
    """
    raw = connection.connection.driver_connection
    assert isinstance(raw, sqlite3.Connection), f"not a sqlite3 connection: {raw!r}"
    if raw.execute("PRAGMA foreign_keys").fetchone() == (0,):
        yield  # already off (not a danlu engine): nothing to turn back on
        return
    if raw.in_transaction:
        raw.execute("COMMIT")
    raw.execute("PRAGMA foreign_keys=OFF")
    try:
        raw.execute("BEGIN IMMEDIATE")
        yield
        violations = raw.execute("PRAGMA foreign_key_check").fetchall()
        if violations:
            shown = "; ".join(
                f"{table} row {rowid} refers to a missing {parent} row"
                for table, rowid, parent, _ in violations[:SHOWN_VIOLATIONS]
            )
            more = len(violations) - SHOWN_VIOLATIONS
            raise CommandError(
                f"the migration left {len(violations)} row(s) whose foreign key refers to no "
                f"row ({shown}{f'; and {more} more' if more > 0 else ''}); it was rolled back: "
                "fix the migration so that it deletes or updates those rows"
            )
        raw.execute("COMMIT")
    finally:
        if raw.in_transaction:
            raw.execute("ROLLBACK")
        raw.execute("PRAGMA foreign_keys=ON")
        # the caller's transaction goes on (empty); a deferred BEGIN never waits for the
        # write lock, so it cannot hide the migration's own error behind "database is locked"
        raw.execute("BEGIN")


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_sqlite(connection: Connection) -> None:
    """:func:`_run` with foreign keys off, in a transaction (the caller's, or one begun here
    and committed when the migrations are)."""
    if connection.in_transaction():
        with _sqlite_foreign_keys_off(connection):
            _run(connection)
        return
    with connection.begin(), _sqlite_foreign_keys_off(connection):
        _run(connection)


def _migrate(connection: Connection) -> None:
    if connection.dialect.name == "sqlite":
        _run_sqlite(connection)
    else:
        _run(connection)


def run_migrations_online() -> None:
    """Migrate through ``config.attributes['connection']`` or a new engine for the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise ConfigError("no database URL or connection given to the migration environment")
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            _migrate(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise ConfigError("danlu migrations run online only (upgrade_database)")
run_migrations_online()
