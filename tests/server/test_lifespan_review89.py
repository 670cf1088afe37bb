"""The app's lifespan run twice, and a token-use write that outlives the shutdown's wait.

A second lifespan (a test client entered twice, an embedding app restarting it) worked
with what the first one's end had closed for good: the warm tracers (every estimate
failed), the token-use writes (no use stored any more), and the NVML handles of the energy
meter and the health check (every pass failed). A token-use write that outlived the
shutdown's wait handed its connection back to the pool the shutdown had disposed of,
where it stayed open for the life of the process.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import wait_for
from sqlalchemy import event

from danlu.config import load_settings
from danlu.devices.health import GpuFault
from danlu.devices.inventory import GpuKey
from danlu.estimate.memory import tracer
from danlu.server import app as app_module
from danlu.server.db import Database
from danlu.server.energy import EnergyLoop
from danlu.server.health import HealthLoop
from danlu.server.routes import deps
from danlu.server.services import users

NOW = 1_000_000.0


class _Handle:
    """A health check and an energy meter in one, that refuses to be used once closed (as
    NVML's do)."""

    def __init__(self) -> None:
        self.uses = 0
        self.closed = False

    def _use(self) -> None:
        if self.closed:
            raise AssertionError("used after close")
        self.uses += 1

    def check(self) -> list[GpuFault]:
        self._use()
        return []

    def read(self, t: float, busy: Mapping[GpuKey, int]) -> dict[GpuKey, float]:
        self._use()
        return {("n", 0): 10.0 * self.uses}

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("loop_kind", [HealthLoop, EnergyLoop])
def test_a_loop_started_again_after_its_stop_opens_a_new_handle(
    sqlite_db: Database, loop_kind: type[HealthLoop] | type[EnergyLoop]
) -> None:
    made: list[_Handle] = []

    def opener() -> _Handle:
        made.append(_Handle())
        return made[-1]

    first = _Handle()
    loop = loop_kind(sqlite_db, first, interval=0.01, opener=opener)
    loop.start()
    try:
        wait_for(lambda: first.uses >= 1, 10)
    finally:
        loop.stop()
    assert first.closed
    loop.start()  # a second lifespan
    try:
        wait_for(lambda: bool(made) and made[0].uses >= 2, 10)
    finally:
        loop.stop()
    assert len(made) == 1 and made[0].closed


def test_a_stopped_health_loop_started_again_blames_with_a_new_check(sqlite_db: Database) -> None:
    """A failed run's blame in a second lifespan makes a GPU pass (it checked nothing)."""
    second = _Handle()
    health = HealthLoop(sqlite_db, _Handle(), interval=3600, opener=lambda: second)
    health.stop()
    health.reopen()
    assert health.blame([("n", 0)], since=NOW, now=NOW + 1) is None
    assert second.uses == 1
    health.stop()
    assert second.closed


def test_an_energy_loop_reopened_charges_from_its_new_meters_first_reading(
    sqlite_db: Database,
) -> None:
    """The new meter reads from 0: its first reading is where charging starts again (not
    the old meter's last reading, under which nothing would be charged for a while)."""
    second = _Handle()
    loop = EnergyLoop(sqlite_db, _Handle(), interval=3600, opener=lambda: second)
    loop.run_once(NOW)
    loop.run_once(NOW + 1)
    loop.stop()
    loop.reopen()
    loop.run_once(NOW + 2)
    assert second.uses == 1
    assert loop._charged == {("n", 0): 10.0}  # the new meter's first reading
    loop.stop()


def _app(db_url: str, tmp_path: Path, **more: Any) -> tuple[Any, str]:
    """An app (no loops) on ``db_url`` and a user's token."""
    settings = load_settings(
        home=tmp_path / "home", fake_gpus="1x80GiB", database_url=db_url, **more
    )
    app = app_module.create_app(settings, start_loops=False)
    state: deps.ServerState = app.state.danlu
    with state.db.session() as s:
        alice = users.create_user(s, "alice", now=NOW)
        token = users.issue_token(s, alice, "cli", now=NOW)
    return app, token


def test_a_second_lifespan_has_working_tracers_and_energy_meter(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, _token = _app(db_url, tmp_path, energy_interval=5.0)
    state: deps.ServerState = app.state.danlu
    worker: Any = object()
    monkeypatch.setattr(tracer, "_start_worker", lambda: worker)
    with TestClient(app):
        pass
    with TestClient(app):
        assert state.tracers is not None
        assert state.tracers.take() is worker  # refused before: "these warm tracers are closed"
        metered: EnergyLoop = app.state.energy
        metered.run_once()  # failed before: the meter was closed
        metered.run_once()


def test_a_second_lifespan_stores_token_uses(db_url: str, tmp_path: Path) -> None:
    app, token = _app(db_url, tmp_path)
    state: deps.ServerState = app.state.danlu
    with TestClient(app):
        pass
    with TestClient(app) as client:
        answer = client.get("/api/v1/users/me", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200

        def last_used() -> float | None:
            with state.db.read_session() as s:
                found = users.find_token(s, token)
                assert found is not None
                return found.last_used_at

        assert wait_for(last_used, 10, 0.05) is not None


class _ShortWait(deps.BackgroundWrites):
    """Token-use writes whose shutdown waits a fraction of a second."""

    def close(self, timeout: float = 0.2) -> bool:
        return super().close(timeout)


def test_a_token_use_write_outliving_the_shutdown_closes_its_connection(
    db_url: str, tmp_path: Path
) -> None:
    app, token = _app(db_url, tmp_path)
    state: deps.ServerState = app.state.danlu
    state.token_writes = _ShortWait()
    writing, release = threading.Event(), threading.Event()
    used: list[Any] = []
    writers: list[threading.Thread] = []

    def checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        """The token-use write, its connection taken (no transaction begun: on SQLite no
        lock held), waits until the shutdown has given up on it."""
        if threading.current_thread().name == "danlu-token-use":
            used.append(dbapi_connection)
            writers.append(threading.current_thread())
            writing.set()
            release.wait(10)

    event.listen(state.db.engine, "checkout", checkout)
    # the disposed pool is kept (as a reference cycle may keep it): only a collection of it
    # closed a connection handed back to it
    kept = state.db.engine.pool
    try:
        with TestClient(app) as client:
            answer = client.get("/api/v1/users/me", headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 200
            assert writing.wait(10)
        release.set()  # the shutdown stopped waiting for it: the engine is disposed
        writers[0].join(10)
        assert not writers[0].is_alive()
        with pytest.raises(Exception):  # noqa: B017 - sqlite3's and psycopg's differ
            used[0].cursor()  # closed, not handed back to the disposed pool
        assert kept is not state.db.engine.pool
    finally:
        release.set()
        state.db.dispose()
