"""Engine and session factory: SQLite (WAL, foreign keys, busy timeout, case-sensitive
``LIKE``) or PostgreSQL (psycopg 3).

SQLite transactions begin with ``BEGIN IMMEDIATE`` so that a transaction that reads and then
writes never fails with "database is locked" half-way (writers queue on the busy timeout
instead); sessions opened with :meth:`Database.read_session` use a plain deferred ``BEGIN`` and
read a WAL snapshot concurrently with the writer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from danlu.config import normalise_database_url
from danlu.core.errors import ConfigError

SQLITE_BUSY_TIMEOUT_MS = 30_000
_READONLY = "danlu_readonly"


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite ``url`` as SQLite opens it (the URL's percent-escapes decoded, as
    SQLAlchemy decodes them); None for another database, an in-memory one or a ``file:``
    URI."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database.startswith((":", "file:")):
        return None
    return Path(database)


def database_shown(url: str) -> str:
    """How messages name the database of ``url``: a SQLite file by its path
    (:func:`sqlite_file`), another by its URL with the password hidden."""
    path = sqlite_file(url)
    return str(path) if path is not None else make_url(url).render_as_string(hide_password=True)


def _make_directory(path: Path) -> None:
    """Make the directory of the SQLite file ``path`` (mode 0700) when it is missing; a
    :class:`ConfigError` naming the setting and the fix when it cannot be made."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        if isinstance(exc, FileExistsError):  # a file where a directory should be
            why = f"{exc.filename} is not a directory"
        else:
            why = exc.strerror or str(exc)
            if exc.filename and str(exc.filename) != str(path.parent):
                why += f" ({exc.filename})"
        raise ConfigError(
            f"cannot open the database {path} (--database-url, DANLU_DATABASE_URL): cannot "
            f"make its directory {path.parent}: {why}; give a file in a directory this user "
            "can create and write"
        ) from None


def make_engine(url: str, echo: bool = False, pool_size: int = 10) -> Engine:
    """Create an engine for ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``).

    For a SQLite file the parent directory is created (mode 0700); one that cannot be is a
    :class:`ConfigError` naming the setting.
    """
    try:
        url = normalise_database_url(url)
    except ValueError as exc:
        raise ConfigError(
            f"DANLU_DATABASE_URL: {exc}; use sqlite:///PATH or postgresql+psycopg://..."
        ) from None
    if url.startswith("sqlite"):
        path = sqlite_file(url)
        if path is not None:
            _make_directory(path)
        engine = create_engine(
            url,
            echo=echo,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        )
        _configure_sqlite(engine)
        return engine
    return create_engine(
        url, echo=echo, pool_size=pool_size, max_overflow=2 * pool_size, pool_pre_ping=True
    )


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite would defer it).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # LIKE (a name pattern, an id prefix) matches case-sensitively, as on PostgreSQL
        cursor.execute("PRAGMA case_sensitive_like=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        readonly = connection.get_execution_options().get(_READONLY, False)
        connection.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")


class Database:
    """An engine plus a session factory. Sessions do not expire objects on commit."""

    def __init__(self, url: str, echo: bool = False) -> None:
        self.url = normalise_database_url(url) if "://" in url else url
        self.engine = make_engine(url, echo=echo)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A read-write session: commits when the block ends, rolls back on an exception."""
        with self.sessionmaker() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A session for reads (on SQLite it does not take the write lock); never commits."""
        with self.sessionmaker() as session:
            session.connection(execution_options={_READONLY: True})
            try:
                yield session
            finally:
                session.rollback()

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
