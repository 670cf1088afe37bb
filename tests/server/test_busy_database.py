"""A busy database is a 503 with Retry-After (nothing written), and the client retries it; an
unreachable one is a 503 too, and the control plane carries on once it is back."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from helpers import PgError, live_server, spec, wait_state
from pg_server import PgServer, pg_bin
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from danlu.client import Client, ServerError
from danlu.server.app import is_busy, is_unreachable
from danlu.server.db import Database
from danlu.server.db import engine as db_engine


def _hold_write_lock(path: str, held: threading.Event, release: threading.Event) -> None:
    """Hold SQLite's write lock on ``path`` from another connection until ``release`` is set
    (at most 30 s), so a request the test sends meanwhile meets the lock however slow the
    machine is."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    try:
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        release.wait(30)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def _start_locker(path: str) -> tuple[threading.Thread, threading.Event]:
    """Start a thread holding the write lock; returns it and the event that releases it."""
    held, release = threading.Event(), threading.Event()
    locker = threading.Thread(target=_hold_write_lock, args=(path, held, release))
    locker.start()
    assert held.wait(10), "the locker never took the write lock"
    return locker, release


def test_a_write_that_waits_out_the_lock_is_a_503_and_the_client_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_engine, "SQLITE_BUSY_TIMEOUT_MS", 200)
    with live_server(tmp_path, start_loops=False) as live:
        state = live.prepared.app.state.danlu if live.prepared else None
        assert state is not None
        path = state.db.engine.url.database
        assert path

        locker, release = _start_locker(path)
        with live.client() as raw:
            answer = raw.post("/jobs", json=spec("busy", "pass"))
        release.set()
        locker.join()
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "1"
        assert answer.json()["error"]["type"] == "busy"
        with live.client() as raw:
            listed = raw.get("/jobs").json()
        assert not any(j["name"] == "busy" for j in listed)  # nothing was written

        # The client sends the same request again after Retry-After and gets through: the
        # lock goes 1.2 s after it was taken, before the client's retries run out.
        locker, release = _start_locker(path)
        timer = threading.Timer(1.2, release.set)
        timer.start()
        try:
            with Client(live.url, live.token) as client:
                job = client.submit(spec("retried", "pass"))
        finally:
            release.set()
            timer.cancel()
            locker.join()
        assert job["name"] == "retried"

        # Without retries the 503 reaches the caller as a ServerError naming the cause.
        locker, release = _start_locker(path)
        try:
            with (
                Client(live.url, live.token, busy_retries=0) as client,
                pytest.raises(ServerError, match="busy"),
            ):
                client.submit(spec("given-up", "pass"))
        finally:
            release.set()
            locker.join()


@pytest.mark.parametrize(
    ("orig", "busy"),
    [
        (sqlite3.OperationalError("database is locked"), True),
        (sqlite3.OperationalError("no such table: jobs"), False),
        (PgError("40001"), True),  # serialization failure
        (PgError("40P01"), True),  # deadlock detected
        (PgError("55P03"), True),  # lock not available
        (PgError("42P01"), False),  # undefined table: a bug, stays a 500
    ],
)
def test_only_lock_and_conflict_errors_count_as_busy(orig: Exception, busy: bool) -> None:
    assert is_busy(OperationalError("statement", {}, orig)) is busy


@pytest.mark.parametrize(
    ("orig", "unreachable"),
    [
        (PgError("08006"), True),  # connection failure
        (PgError("57P01"), True),  # admin shutdown
        (PgError("42P01"), False),
        (sqlite3.OperationalError("unable to open database file"), True),
        (sqlite3.OperationalError("no such table: jobs"), False),
    ],
)
def test_what_counts_as_an_unreachable_database(orig: Exception, unreachable: bool) -> None:
    assert is_unreachable(OperationalError("statement", {}, orig)) is unreachable


def test_a_postgresql_outage_is_a_503_and_the_control_plane_carries_on(tmp_path: Path) -> None:
    """The database goes down under a running control plane (as in a crash or a failover):
    requests are a 503 naming the cause (a 500 before), the reconcile loop keeps trying, and
    once the database is back the jobs run to the end."""
    bindir = pg_bin()
    if bindir is None:
        if os.environ.get("DANLU_TEST_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required: apt-get install -y postgresql")
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    pg = PgServer(bindir)
    pg.start()
    try:
        admin = Database(pg.url("postgres"))
        with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("CREATE DATABASE outage"))
        admin.dispose()
        with (
            live_server(tmp_path, db_url=pg.url("outage"), fake_gpus="1x80GiB") as live,
            live.client() as c,
        ):
            first = c.post("/jobs", json=spec("first", "import time; time.sleep(3)")).json()
            second = c.post("/jobs", json=spec("second", "pass")).json()
            wait_state(c, first["id"], "RUNNING")
            pg.halt("fast")  # committed jobs survive (this server's commits are async)
            down = c.get("/jobs")
            assert down.status_code == 503, down.text
            assert down.json()["error"]["type"] == "unavailable"
            assert down.headers["Retry-After"] == "5"
            time.sleep(1.0)  # reconcile passes fail meanwhile, and the loop goes on
            pg.resume()
            for job in (first, second):
                wait_state(c, job["id"], "SUCCEEDED", timeout=60)
    finally:
        pg.stop()
