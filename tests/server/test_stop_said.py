"""A control plane stopped by a signal (systemd's SIGTERM, Ctrl-C) says in its log that it is
stopping and why, which jobs it leaves running (stopping it stops none) and that it stopped.
It stopped without a word."""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from danlu.config import load_settings
from danlu.server import main
from danlu.server.services import jobs, users


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("danlu.server") and r.levelno == logging.INFO
    ]


def test_a_plane_stopped_by_sigterm_says_why_what_runs_on_and_that_it_stopped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(home=tmp_path / "home")
    prepared = main.prepare(
        settings, port=0, fake_gpus="1x80GiB", start_loops=False, announce=lambda _text: None
    )
    db = prepared.app.state.danlu.db
    with db.session() as s:
        alice = users.create_user(s, "alice")
        body = {"name": "long", "command": ["python", "train.py"], "resources": {"gpus": 1}}
        running = jobs.submit(s, body, alice)
        running.state = "RUNNING"  # as the loop left it: its run goes on without the plane
        running_id = running.id
    config = uvicorn.Config(
        prepared.app,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=main.GRACEFUL_SHUTDOWN,
    )
    server = main._Server(config, Path(settings.home), settings.executor)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [prepared.sock]})
    caplog.set_level(logging.INFO)
    try:
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.started
        server.handle_exit(signal.SIGTERM, None)  # what uvicorn's handler of SIGTERM calls
        thread.join(30)
        assert not thread.is_alive()
    finally:
        server.should_exit = True
        thread.join(30)
        prepared.close()
    said = _said(caplog)
    stopping = next(i for i, line in enumerate(said) if "control plane stopping" in line)
    assert "SIGTERM: systemctl stop, kill" in said[stopping]
    left = next(i for i, line in enumerate(said) if "keep running" in line)
    assert f"1 running job(s) keep running ({running_id})" in said[left]
    assert "stops no job" in said[left]
    assert said[-1] == f"control plane stopped (home {settings.home})"
    assert stopping < left < len(said) - 1


def test_the_cause_of_a_stop_is_named() -> None:
    assert main.stop_cause(signal.SIGINT) == "SIGINT: Ctrl-C"
    assert main.stop_cause(signal.SIGHUP) == "SIGHUP"
    assert main.stop_cause(None) == "told to exit"
