"""Fixtures for the store tests: a migrated SQLite file and a real PostgreSQL server.

PostgreSQL comes from Debian's ``postgresql`` package (``apt-get install -y postgresql``); this
fixture installs nothing. It runs ``initdb`` / ``pg_ctl`` from ``/usr/lib/postgresql/*/bin``
in a temporary directory, as the ``postgres`` system user when the tests run as root
(PostgreSQL refuses to run as root), listening on a free port on 127.0.0.1 and a unix socket
in that directory. Without ``initdb`` the PostgreSQL cases are skipped, or fail when
``DANLU_TEST_REQUIRE_POSTGRES=1`` (CI).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import truncate
from pg_server import PgServer, pg_bin
from sqlalchemy import text

from danlu.server.db import Database, upgrade_database

BACKENDS = ["sqlite", "postgresql"]


BROWSER_WAIT_MS = 15_000
"""How long a dashboard test's ``expect(...)`` waits for the page to show a thing (Playwright's
default is 5 s): the page's first load makes several API calls, and with the suite's workers
on every core it took over 5 s in CI now and then. A wait, not a timing check: a page that
shows the thing sooner passes sooner."""


@pytest.fixture(autouse=True, scope="session")
def _browser_waits() -> None:
    """Playwright's assertions wait :data:`BROWSER_WAIT_MS` in every dashboard test."""
    try:
        from playwright.sync_api import expect
    except ImportError:  # no browser tests without it
        return
    expect.set_options(timeout=BROWSER_WAIT_MS)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer | None]:
    bindir = pg_bin()
    if bindir is None:
        if os.environ.get("DANLU_TEST_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required: apt-get install -y postgresql")
        yield None
        return
    server = PgServer(bindir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_template(pg_server: PgServer | None) -> str | None:
    """A migrated database on the server; each test truncates its tables."""
    if pg_server is None:
        return None
    admin = Database(pg_server.url("postgres"))
    with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("CREATE DATABASE danlu_test"))
    admin.dispose()
    url = pg_server.url("danlu_test")
    upgrade_database(url)
    return url


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "danlu.db"
    upgrade_database(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_db(tmp_path: Path, sqlite_template: Path) -> Iterator[Database]:
    """A migrated SQLite store only, for tests of timing or of the environment that need no
    second backend."""
    target = tmp_path / "sqlite-only.db"
    shutil.copyfile(sqlite_template, target)
    database = Database(f"sqlite:///{target}")
    try:
        yield database
    finally:
        database.dispose()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(
    backend: str,
    tmp_path: Path,
    sqlite_template: Path,
    request: pytest.FixtureRequest,
) -> str:
    """The URL of a clean, migrated database of ``backend``."""
    if backend == "sqlite":
        target = tmp_path / "danlu.db"
        shutil.copyfile(sqlite_template, target)
        return f"sqlite:///{target}"
    url = request.getfixturevalue("pg_template")
    if url is None:
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    db = Database(url)
    truncate(db)
    db.dispose()
    return str(url)


@pytest.fixture
def fresh_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of an empty (never migrated) database of ``backend``: a new SQLite file, or a
    new database on the test session's PostgreSQL server, dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    server = request.getfixturevalue("pg_server")
    if server is None:
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    name = f"fresh_{uuid.uuid4().hex[:12]}"
    admin = Database(server.url("postgres"))
    try:
        with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
        yield str(server.url(name))
        with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    finally:
        admin.dispose()


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A :class:`Database` on a clean, migrated store."""
    database = Database(db_url)
    try:
        yield database
    finally:
        database.dispose()


NOW = 1_000_000.0


@pytest.fixture
def seeded(db: Database) -> Database:
    """A store with users ``alice`` (user) and ``root`` (admin) and one node of 4 x 80 GiB
    GPUs (``node-0``) plus one of 2 x 24 GiB L4s (``node-1``)."""
    from danlu.core.cluster import Node, gpu_type
    from danlu.core.units import GiB
    from danlu.server.services import cluster, users

    with db.session() as s:
        users.create_user(s, "alice", now=NOW)
        users.create_user(s, "bob", now=NOW)
        users.create_user(s, "root", "admin", now=NOW)
        cluster.replace_inventory(
            s,
            [
                Node("node-0", 4, gpu_type("H100")),
                Node("node-1", 2, gpu_type("L4"), rack="rack-1"),
            ],
            fake=True,
            now=NOW,
        )
    assert gpu_type("H100").memory == 80 * GiB
    return db
