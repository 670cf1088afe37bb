"""The server: a webhook sender stopped while a post is under way lets it
finish; a loop started again while its stopped thread's pass hangs does not wait for ever;
a project's numbers are refused as strings."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

import pytest
from helpers import live_server, wait_for
from test_lifecycle_review76 import Endpoint

from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.server import main
from danlu.server.db import Database
from danlu.server.loops import PeriodicLoop
from danlu.server.services import webhooks
from danlu.server.webhook_sender import WebhookSender

log = logging.getLogger(__name__)


def _delivery(db: Database, hook_id: str) -> tuple[bool, int, str | None, str | None]:
    with db.read_session() as s:
        [delivery] = webhooks.deliveries(s, hook_id)
        return delivery.delivered, delivery.attempts, delivery.lock_token, delivery.last_error


def test_a_sender_stopped_mid_post_lets_the_post_finish_and_writes_its_outcome(
    sqlite_db: Database,
) -> None:
    """``stop(timeout)`` shorter than a post closed the sender's connections under it: a
    post the endpoint answered 200 was written as a failure (and posted again later)."""
    slow = Endpoint(delay=1.0)
    with sqlite_db.session() as s:
        hook = webhooks.create(s, slow.url, "admin")
        webhooks.ping(s, hook.id)
    sender = WebhookSender(sqlite_db, interval=0.05, timeout=10.0)
    sender.start()
    try:
        wait_for(lambda: slow.posts == 1, 30)
        started = time.monotonic()
        sender.stop(timeout=0.05)
        assert time.monotonic() - started < 5  # stop returned at its timeout
        wait_for(lambda: _delivery(sqlite_db, hook.id)[2] is None, 30)
        assert _delivery(sqlite_db, hook.id) == (True, 1, None, None)
    finally:
        sender.stop()
        slow.close()


def test_a_sender_stopped_then_started_again_still_posts(sqlite_db: Database) -> None:
    """The app's lifespan may run twice (a test client entered twice): the second start
    found the sender's pool shut down and its clients closed, and every claimed delivery
    stayed locked, unposted."""
    endpoint = Endpoint()
    with sqlite_db.session() as s:
        hook = webhooks.create(s, endpoint.url, "admin")
    sender = WebhookSender(sqlite_db, interval=0.05, timeout=5.0)
    try:
        sender.start()
        sender.stop()
        with sqlite_db.session() as s:
            webhooks.ping(s, hook.id)
        sender.start()
        wait_for(lambda: _delivery(sqlite_db, hook.id)[0], 30)
        assert _delivery(sqlite_db, hook.id) == (True, 1, None, None)
    finally:
        sender.stop()
        endpoint.close()


def test_a_loop_started_again_while_a_stopped_pass_hangs_returns_at_its_timeout() -> None:
    """start() waited without a timeout for the stopped thread's last pass: a hung pass
    held the caller for ever. Now the old thread is told to go on: still one thread."""
    entered, release = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []

    def work() -> None:
        threads.append(threading.current_thread())
        entered.set()
        release.wait(60)

    loop = PeriodicLoop("danlu-test-hang", 3600.0, work, log, "test pass", "test passes work")
    loop.start()
    try:
        assert entered.wait(30)
        assert loop.stop(timeout=0.01) is False
        entered.clear()
        starting = threading.Thread(target=loop.start, kwargs={"timeout": 0.2}, daemon=True)
        starting.start()
        starting.join(10)
        assert not starting.is_alive()  # returned although the pass still hangs
        assert len([t for t in threading.enumerate() if t.name == "danlu-test-hang"]) == 1
        release.set()
        assert entered.wait(30)  # the old thread goes on to its next pass
        assert len(threads) == 2 and threads[0] is threads[1]
    finally:
        release.set()
        assert loop.stop(timeout=30) is True


@pytest.mark.parametrize(
    ("field", "value"),
    [("priority", "3"), ("quota_gpus", "2"), ("quota_gpu_memory", "1024"), ("share", "2")],
)
def test_a_projects_number_given_as_a_string_is_refused_naming_the_field(
    tmp_path: Path, field: str, value: str
) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live,
        live.client() as admin,
    ):
        created = admin.post("/projects", json={"name": "p", field: value})
        assert created.status_code == 422, created.text
        assert created.json()["error"]["field"] == field
        assert "without quotes" in created.json()["error"]["message"]
        assert admin.post("/projects", json={"name": "p"}).status_code == 201
        changed = admin.put("/projects/p", json={field: value})
        assert changed.status_code == 422, changed.text
        assert changed.json()["error"]["field"] == field
        [project] = [p for p in admin.get("/projects").json() if p["name"] == "p"]
        assert project["priority"] == 0 and project["share"] == 1.0


def test_a_start_up_that_fails_after_binding_gives_the_port_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prepare() bound the port, then a later refusal (here a health program that cannot
    run) left the socket listening: the same process trying again on that port was told
    it was in use."""
    program = tmp_path / "check"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    settings = load_settings(
        home=tmp_path / "home", fake_gpus="1x80GiB", health_program=str(program)
    )
    bound: list[socket.socket] = []

    def bind_and_break(host: str, port: int) -> socket.socket:
        sock = real_bind(host, port)
        bound.append(sock)
        program.chmod(0o644)  # refused by create_app, after the bind
        return sock

    real_bind = main.bind
    monkeypatch.setattr(main, "bind", bind_and_break)
    with pytest.raises(ConfigError, match="is not executable"):
        main.prepare(settings, port=0, start_loops=False, announce=lambda _text: None)
    [sock] = bound
    assert sock.fileno() == -1  # closed
