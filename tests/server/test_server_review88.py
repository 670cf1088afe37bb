"""The server: a database error that ends a reconcile pass no longer loses the
errors the pass met before it (a retention deletion that failed: never logged nor counted);
a token's last use is not written once the app has shut down (a new connection after the
engine was disposed), and the shutdown waits a while for one under way; a health or energy
loop whose pass outlives its stop's timeout releases its NVML handle as that pass ends, not
under it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import user_and_nodes, wait_for
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.devices.health import GpuFault
from danlu.devices.inventory import GpuKey, inventory_from_cluster
from danlu.executors import ExecutorError, FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server import app as app_module
from danlu.server.db import Database
from danlu.server.energy import EnergyLoop
from danlu.server.health import HealthLoop
from danlu.server.metrics import ServerMetrics
from danlu.server.reconcile import Reconciler
from danlu.server.routes import deps
from danlu.server.services import jobs, retention, users

NOW = 1_000_000.0
DAY = 86_400.0
NODE = Node("a", 4, gpu_type("H100"))


# -- a database error ending a reconcile pass ----------------------------------------------------


def test_a_database_error_in_a_retention_pass_still_reports_the_errors_met_before_it(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The purge of j0 failed (its log on a disk not mounted), then the store failed while
    j1's rows were deleted: the pass raised with the errors in a list of its own, so j0's
    failure was neither logged nor counted in danlu_reconcile_errors_total. It is now, and
    the database error still ends the pass (the loop logs that)."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
        ids = [jobs.submit(s, {**body, "name": f"j{i}"}, alice, now=NOW).id for i in range(2)]
        for job_id in ids:
            jobs.cancel_job(s, job_id, now=NOW + 1)
    cluster = Cluster((NODE,))
    executor = FakeExecutor(cluster, FakeWorld())
    settings = load_settings(home=tmp_path, retention_days=0.5)
    server_metrics = ServerMetrics(db, inventory_from_cluster(cluster))
    loop = Reconciler(db, executor, settings, policy=make_policy("fifo"), metrics=server_metrics)
    real_discard = executor.discard
    unmounted = f"job {ids[0]}: its log is on a disk not mounted"

    def discard(job_id: str) -> None:
        if job_id == ids[0]:
            raise ExecutorError(unmounted)
        real_discard(job_id)

    def purged(session: Any, job_id: str, now: float | None = None) -> None:
        raise OperationalError("UPDATE jobs", {}, Exception("server closed the connection"))

    monkeypatch.setattr(executor, "discard", discard)
    monkeypatch.setattr(retention, "purged", purged)
    caplog.set_level(logging.WARNING, logger="danlu.server.reconcile")
    try:
        with pytest.raises(OperationalError, match="server closed the connection"):
            loop.run_once(now=NOW + DAY)
        said = [r.getMessage() for r in caplog.records if r.name == "danlu.server.reconcile"]
        assert f"reconcile: purge {ids[0]}: {unmounted}" in said
        exposed = server_metrics.exposition().decode()
        assert 'danlu_reconcile_errors_total{step="purge"} 1.0' in exposed
    finally:
        loop.stop()


# -- the token-use writes and the shutdown --------------------------------------------------------


def _app_with_token(db_url: str, tmp_path: Path) -> tuple[Any, str, int]:
    """An app (no loops) on ``db_url``, a user's token and that token's row id."""
    settings = load_settings(home=tmp_path / "home", fake_gpus="1x80GiB", database_url=db_url)
    app = app_module.create_app(settings, start_loops=False)
    state: deps.ServerState = app.state.danlu
    with state.db.session() as s:
        alice = users.create_user(s, "alice", now=NOW)
        token = users.issue_token(s, alice, "cli", now=NOW)
        found = users.find_token(s, token)
        assert found is not None
        return app, token, found.id


def test_a_token_use_written_after_the_shutdown_opens_no_connection(
    db_url: str, tmp_path: Path
) -> None:
    """A request's token-use thread that ran only once the app had shut down opened a new
    connection (the disposed engine makes a new pool), left open for the life of the
    process (a PostgreSQL session)."""
    app, _token, token_id = _app_with_token(db_url, tmp_path)
    state: deps.ServerState = app.state.danlu
    with TestClient(app):
        pass
    opened: list[object] = []
    event.listen(state.db.engine, "connect", lambda conn, _record: opened.append(conn))
    try:
        deps._store_use(state, token_id, time.time())
        assert opened == []
    finally:
        state.db.dispose()


def test_the_shutdown_waits_for_a_token_use_write_under_way(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shutdown disposed the engine while a token's use was being written; it now
    waits for that write (a while: deps.TOKEN_USE_WAIT_SECONDS) and disposes it after."""
    app, token, _token_id = _app_with_token(db_url, tmp_path)
    state: deps.ServerState = app.state.danlu
    happened: list[str] = []
    writing, release = threading.Event(), threading.Event()
    real_touch, real_dispose = users.touch_token, state.db.dispose

    def touch(session: Any, token_id: int, now: float | None = None) -> bool:
        writing.set()
        release.wait(10)
        written = real_touch(session, token_id, now)
        happened.append("written")
        return written

    def dispose() -> None:
        happened.append("disposed")
        real_dispose()

    monkeypatch.setattr(users, "touch_token", touch)
    monkeypatch.setattr(state.db, "dispose", dispose)
    with TestClient(app) as client:
        answer = client.get("/api/v1/users/me", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200
        assert writing.wait(10)
        threading.Timer(0.3, release.set).start()
    assert happened == ["written", "disposed"]


# -- NVML handles and a pass that outlives its loop's stop ----------------------------------------


class _SlowHandle:
    """An NVML handle (a health check, an energy meter) whose second use waits for
    :attr:`release`; it notes a close that comes while it is in use."""

    def __init__(self) -> None:
        self.uses = 0
        self.in_use = threading.Event()
        self.release = threading.Event()
        self.closed = False
        self.closed_while_in_use = False

    def _use(self) -> None:
        if self.closed:
            raise AssertionError("used after close")
        self.uses += 1
        if self.uses == 2:
            self.in_use.set()
            self.release.wait(10)
        if self.closed:
            self.closed_while_in_use = True

    def check(self) -> list[GpuFault]:
        """The health check's use."""
        self._use()
        return []

    def read(self, t: float, busy: Mapping[GpuKey, int]) -> dict[GpuKey, float]:
        """The energy meter's use."""
        self._use()
        return {}

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("loop_kind", [HealthLoop, EnergyLoop])
def test_a_pass_outliving_the_stop_releases_its_handle_as_it_ends(
    sqlite_db: Database, loop_kind: type[HealthLoop] | type[EnergyLoop]
) -> None:
    """stop() closed the health check (or the energy meter) at its timeout while the loop's
    pass still used it (NVML shut down under its calls)."""
    handle = _SlowHandle()
    loop = loop_kind(sqlite_db, handle, interval=0.01)
    loop.start()
    try:
        assert handle.in_use.wait(10)
        loop.stop(timeout=0.1)
        assert not handle.closed  # the pass still uses it
        handle.release.set()
        wait_for(lambda: handle.closed, 10)
        assert not handle.closed_while_in_use
    finally:
        handle.release.set()
        loop.stop()
    assert handle.closed


def test_a_health_loop_started_again_while_its_stopped_pass_ran_keeps_its_check(
    sqlite_db: Database,
) -> None:
    """The stopped thread goes on when started again before its pass ends (PeriodicLoop):
    the check its stop left to that pass to close stays open for the passes after."""
    check = _SlowHandle()
    health = HealthLoop(sqlite_db, check, interval=0.01)
    health.start()
    try:
        assert check.in_use.wait(10)
        health.stop(timeout=0.1)
        health.start()  # the stopped thread still in its pass goes on (said in the log)
        check.release.set()
        wait_for(lambda: check.uses >= 4, 10)  # passes go on with the check
        assert not check.closed
    finally:
        check.release.set()
        health.stop()
    assert check.closed
