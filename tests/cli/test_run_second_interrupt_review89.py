"""``danlu run`` told to stop (Ctrl-C) cancels its job; a second Ctrl-C while that cancel
waits on the server leaves at once, exit 130, naming the job and how to cancel it. It
escaped as a bare KeyboardInterrupt: no word that the job might still be running, holding
its GPUs."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import typer
from cli_fake_api import TOKEN
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli import run as run_cli
from danlu.client import Client


class Interrupted:
    """A server whose job runs; reading its output is ended by a Ctrl-C, and so is the
    cancel that follows (``cancel_interrupted``), or the cancel is answered."""

    def __init__(self, cancel_interrupted: bool) -> None:
        self.cancel_interrupted = cancel_interrupted
        self.cancels = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST" and path.endswith("/jobs"):
            return httpx.Response(201, json={"id": "abc123456789", "state": "RUNNING"})
        if path.endswith("/logs"):
            raise KeyboardInterrupt  # the first Ctrl-C, while attached
        if path.endswith("/cancel"):
            self.cancels += 1
            if self.cancel_interrupted:
                raise KeyboardInterrupt  # the second, while the cancel is on its way
            return httpx.Response(200, json={"id": "abc123456789", "state": "CANCELLED"})
        return httpx.Response(200, json={"id": "abc123456789", "state": "RUNNING"})


def invoke(monkeypatch: pytest.MonkeyPatch, server: Interrupted) -> tuple[int, str]:
    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(server))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    cli = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    run_cli.register(cli)
    cli.command("noop", hidden=True)(lambda: None)
    result = CliRunner().invoke(cli, ["run", "--workdir", "/tmp", "--", "sleep", "60"])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stderr


def test_a_second_ctrl_c_during_the_cancel_leaves_naming_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Interrupted(cancel_interrupted=True)
    code, err = invoke(monkeypatch, server)
    assert server.cancels == 1
    assert code == 130, err
    assert "job abc123456789 may still be running" in err, err
    assert "danlu cancel abc123456789" in err, err


def test_one_ctrl_c_still_cancels_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Interrupted(cancel_interrupted=False)
    code, err = invoke(monkeypatch, server)
    assert server.cancels == 1
    assert code == 130, err
    assert "job abc123456789 cancelled" in err, err
