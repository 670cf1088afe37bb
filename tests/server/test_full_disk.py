"""A full database disk is a 503 naming the cause (it was a 500 "internal error"), nothing is
lost, and the server works again once there is space; the reconcile loop, failing the same
way pass after pass meanwhile, logs the first failure in full and then one line a minute
(it logged a line every pass, every 2 s by default). A launch the node has no room for is
re-queued without counting a restart against the job."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import PgError, live_server, spec, wait_state
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from danlu.server import failures as failure_log
from danlu.server import reconcile
from danlu.server.app import is_full
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs


def test_a_full_sqlite_database_is_a_503_and_work_resumes_once_there_is_room(
    tmp_path: Path,
) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        state = live.prepared.app.state.danlu if live.prepared else None
        assert state is not None
        engine = state.db.engine

        def no_more_pages(dbapi: Any, _record: Any) -> None:
            # A real SQLITE_FULL: the file may not grow past the pages it has now.
            pages = dbapi.execute("PRAGMA page_count").fetchone()[0]
            dbapi.execute(f"PRAGMA max_page_count = {pages}")

        event.listen(engine, "connect", no_more_pages)
        engine.dispose()
        try:
            big = spec("big", "pass", env={"PAYLOAD": "x" * 100_000})  # needs new pages
            full = c.post("/jobs", json=big)
            assert full.status_code == 503, full.text
            assert full.headers["Retry-After"] == "30"
            error = full.json()["error"]
            assert error["type"] == "unavailable"
            assert "disk is full" in error["message"]
            assert c.get("/jobs").status_code == 200  # reading still works
        finally:
            event.remove(engine, "connect", no_more_pages)
            engine.dispose()
        assert not any(j["name"] == "big" for j in c.get("/jobs").json())  # nothing half-written
        job = c.post("/jobs", json=big)
        assert job.status_code == 201, job.text
        wait_state(c, job.json()["id"], "SUCCEEDED")


@pytest.mark.parametrize(
    ("orig", "full"),
    [
        (sqlite3.OperationalError("database or disk is full"), True),
        (PgError("53100"), True),  # PostgreSQL: disk_full
        (PgError("53300"), False),  # too many connections: not about space
        (sqlite3.OperationalError("database is locked"), False),
    ],
)
def test_what_counts_as_a_full_database(orig: Exception, full: bool) -> None:
    assert is_full(OperationalError("statement", {}, orig)) is full


def _failing_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: int, quiet: float
) -> list[logging.LogRecord]:
    """Run the reconcile thread over passes that fail ``failures`` times the same way and
    then work; the loop's log records."""
    monkeypatch.setattr(failure_log, "REPEAT_LOG_SECONDS", quiet)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger(reconcile.__name__)
    logger.addHandler(handler)
    with live_server(tmp_path, start_loops=False) as live:
        state = live.prepared.app.state.danlu if live.prepared else None
        assert state is not None
        loop = Reconciler(state.db, state.executor, state.settings)
        loop._loop.interval = 0.001
        calls = 0

        def run_once(now: float | None = None) -> reconcile.RoundReport:
            nonlocal calls
            calls += 1
            if calls <= failures:
                raise OSError(28, "No space left on device")
            loop._loop.finish()  # one pass that works, then stop
            return reconcile.RoundReport()

        monkeypatch.setattr(loop, "run_once", run_once)
        try:
            loop.start()
            loop._loop.join(30)
        finally:
            loop.stop()
            logger.removeHandler(handler)
    assert calls == failures + 1
    return [r for r in records if r.getMessage().startswith("reconcile pass")]


def test_a_failure_that_repeats_is_logged_once_in_full_then_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _failing_loop(tmp_path, monkeypatch, failures=30, quiet=3600.0)
    assert [r.getMessage() for r in lines] == [
        "reconcile pass failed",
        "reconcile passes work again (after: OSError: [Errno 28] No space left on device)",
    ]
    assert lines[0].exc_info is not None  # the first one with its traceback


def test_repeats_are_counted_once_the_quiet_time_is_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _failing_loop(tmp_path, monkeypatch, failures=4, quiet=0.0)
    assert [r.getMessage() for r in lines[1:-1]] == [
        "reconcile pass failed 1 more times: OSError: [Errno 28] No space left on device"
    ] * 3


def test_a_launch_the_node_cannot_make_is_retried_without_a_restart_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twice the node has no room to launch the job (ENOSPC from the executor): the job is
    re-queued with a backoff and no restart counted (it has none to spare here), `why` says
    what the node lacked, and the third launch runs it. Each such failure used to count as
    a failure of the job, so a full disk failed jobs for good. The loop runs on the test's
    clock, past each backoff; `why` (on the wall clock) is asked within the first."""
    monkeypatch.setattr(jobs, "RESTART_BACKOFF_SECONDS", 100.0)
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live, live.client() as c:
        state = live.prepared.app.state.danlu if live.prepared else None
        assert state is not None
        real = state.executor.submit
        tries: list[str] = []

        def submit(launch: Any) -> Any:
            tries.append(launch.job_id)
            if len(tries) <= 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(launch)

        monkeypatch.setattr(state.executor, "submit", submit)
        job = c.post("/jobs", json=spec("tight", "pass", max_restarts=0)).json()
        loop = Reconciler(state.db, state.executor, state.settings)
        start = time.time()
        loop.run_once(start)
        pending = c.get(f"/jobs/{job['id']}").json()
        assert (pending["state"], pending["restarts"]) == ("PENDING", 0)
        why = c.get(f"/jobs/{job['id']}/why").json()["reason"]
        assert why.startswith("the node could not launch it: [Errno 28] No space left")
        assert "eligible again in" in why
        loop.run_once(start + 50.0)  # within the backoff: not launched again
        assert len(tries) == 1
        loop.run_once(start + 101.0)  # the second try: no room again, a backoff of 200 s
        assert len(tries) == 2 and c.get(f"/jobs/{job['id']}").json()["state"] == "PENDING"

        def run() -> dict[str, Any]:
            loop.run_once(start + 302.0)
            return dict(c.get(f"/jobs/{job['id']}").json())

        deadline = time.monotonic() + 30
        while (now := run())["state"] != "SUCCEEDED" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert now["state"] == "SUCCEEDED", now
        assert now["restarts"] == 0
        assert len(tries) == 3
        events = c.get(f"/jobs/{job['id']}/events").json()
        waits = [e["reason"] for e in events if e["reason"].startswith("re-queued; retry after")]
        assert waits == ["re-queued; retry after 100s", "re-queued; retry after 200s"]
