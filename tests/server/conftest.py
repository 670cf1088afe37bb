"""Fixtures for the store tests: a migrated SQLite file and a real PostgreSQL server.

PostgreSQL comes from Debian's ``postgresql`` package (``apt-get install -y postgresql``); this
fixture installs nothing. It runs ``initdb`` / ``pg_ctl`` from ``/usr/lib/postgresql/*/bin``
in a temporary directory, as the ``postgres`` system user when the tests run as root
(PostgreSQL refuses to run as root), listening on a free port on 127.0.0.1 and a unix socket
in that directory. Without ``initdb`` the PostgreSQL cases are skipped, or fail when
``DANLU_TEST_REQUIRE_POSTGRES=1`` (CI).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import truncate
from sqlalchemy import text

from danlu.server.db import Database, upgrade_database

BACKENDS = ["sqlite", "postgresql"]


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_pg_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


class PgServer:
    """A throw-away PostgreSQL cluster."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="danlu-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.root.chmod(0o700)

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            _as_pg_user([str(self.bindir / argv[0]), *argv[1:]]),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}\n{done.stderr}")

    def start(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        self.resume()

    def resume(self) -> None:
        """Start the cluster's server (again, after :meth:`halt`)."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def halt(self, mode: str = "immediate") -> None:
        """Stop the server, keeping its data for :meth:`resume`: at once, as a crash would
        (``immediate``: with ``synchronous_commit=off`` the last commits may be lost), or
        after writing everything out (``fast``), as an operator's restart would."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def stop(self) -> None:
        try:
            self.halt()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer | None]:
    bindir = _pg_bin()
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
