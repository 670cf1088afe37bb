"""Command line and client edges: ``danlu run`` whose output cannot be written
(a full disk, an I/O error) cancels its job; ``danlu metrics``' table shows markup-like text
as it is; non-finite numbers in a request body, a token that is not printable ASCII and an
undecodable ``server.json`` / ``admin.token`` are errors of the client's DanluError tree.
Against the in-memory API of ``cli_fake_api``."""

from __future__ import annotations

import errno
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from cli_fake_api import TOKEN, FakeApi, metrics_and_events_app, serve_commands
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli import metrics as metrics_cli
from danlu.cli import run as run_cli
from danlu.client import Client, InvalidRequestError, NoServerError, find_server
from danlu.core.errors import ConfigError, DanluError

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"

# -- danlu run: output that cannot be written ------------------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_run_whose_output_hits_a_full_disk_cancels_the_job(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(HERE)]))
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [sys.executable, str(HERE / "run_attached.py"), str(state)],
            stdout=full,
            stderr=subprocess.PIPE,
            env=env,
            timeout=60,
        )
    err = done.stderr.decode()
    assert state.read_text() == "CANCELLED", err
    assert done.returncode == 2, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    last = err.strip().splitlines()[-1]
    assert "cannot write" in last and "No space left on device" in last, err
    assert last.endswith("cancelled"), err


class _BrokenDisk:
    """A stdout whose every write fails as a failing disk does (EIO)."""

    def write(self, text: str) -> int:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    def flush(self) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_run_whose_output_fails_with_an_io_error_cancels_the_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api = FakeApi()
    api.submitted_progress = ["RUNNING"]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs"):
            for job_id in api.logs:
                api.logs[job_id] += b"a line of output\n"
        return api.handler(request)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    monkeypatch.setattr(run_cli, "err", Console(stderr=True, width=300))
    monkeypatch.setattr(sys, "stdout", _BrokenDisk())
    with pytest.raises(typer.Exit) as ended:
        run_cli.run(["sleep", "60"], workdir=Path("/tmp"))
    assert [job["state"] for job in api.jobs.values()] == ["CANCELLED"]
    assert ended.value.exit_code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert "submitted" in lines[0]
    assert len(lines) == 2 and "Input/output error" in lines[1], lines
    assert lines[1].endswith("cancelled"), lines


# -- danlu metrics: markup-like text in a table ------------------------------------------------


def test_metrics_table_shows_markup_like_text_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    api = serve_commands(monkeypatch)
    monkeypatch.setattr(metrics_cli, "console", Console(width=200))
    job = api.add_job("train", state="RUNNING")["id"]
    api.add_metrics(
        job,
        [
            {"step": 1, "time": 0, "loss": 0.5, "phase": "eval[/val]"},
            {"step": 2, "time": 0, "loss": 0.4, "phase": "[bold]train"},
        ],
    )
    result = CliRunner().invoke(metrics_and_events_app(), ["metrics", job, "--keys", "loss,phase"])
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "eval[/val]" in result.stdout and "[bold]train" in result.stdout, result.stdout


def test_metrics_table_cells_are_escaped() -> None:
    out = Console(width=200, record=True)
    out.print(metrics_cli.table([{"step": "[b]7", "time": 0, "tag": "[/x]"}], ["tag"]))
    text = out.export_text()
    assert "[b]7" in text and "[/x]" in text, text


# -- the client: non-finite numbers and other bodies that are not JSON -------------------------


def _client(api: FakeApi) -> Client:
    return Client("http://fake", TOKEN, transport=api.transport())


def test_a_non_finite_number_in_a_body_is_an_invalid_request_naming_it() -> None:
    api = FakeApi()
    client = _client(api)
    job = api.add_job("train", state="RUNNING")["id"]
    spec = {"name": "x", "command": ["true"], "priority": math.inf}
    cases: list[tuple[str, Any]] = [
        ("metrics.0.loss", lambda: client.post_metrics(job, [{"step": 1, "loss": math.nan}])),
        ("priority", lambda: client.submit(spec)),
        ("quota_gpus", lambda: client.update_user("admin", quota_gpus=math.nan)),
        ("share", lambda: client.update_project("p", share=-math.inf)),
    ]
    for field, call in cases:
        with pytest.raises(InvalidRequestError) as raised:
            call()
        assert isinstance(raised.value, DanluError)
        assert raised.value.field == field, raised.value
        assert "finite" in str(raised.value), raised.value
        assert raised.value.status == 0 and raised.value.path.startswith("/api/v1/")
    assert not [r for r in api.requests if r.method != "GET"]  # nothing was sent


def test_a_value_json_cannot_hold_is_an_invalid_request() -> None:
    api = FakeApi()
    client = _client(api)
    job = api.add_job("train", state="RUNNING")["id"]
    with pytest.raises(InvalidRequestError) as raised:
        client.post_metrics(job, [{"step": 1, "when": object()}])
    assert raised.value.field == "metrics.0.when"
    assert "object" in str(raised.value)
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(InvalidRequestError, match="Circular"):
        client.submit_sweep({"name": "s", "values": looped})
    assert not api.requests


def test_finite_bodies_are_still_sent_as_json() -> None:
    api = FakeApi()
    client = _client(api)
    made = client.submit({"name": "x", "command": ["echo", "caf\u00e9"], "priority": 2})
    assert made["priority"] == 2 and made["spec"]["command"] == ["echo", "caf\u00e9"]
    sent = [r for r in api.requests if r.method == "POST"][-1]
    assert sent.headers["content-type"] == "application/json"
    assert json.loads(sent.content)["command"] == ["echo", "caf\u00e9"]


# -- the client: the API token ------------------------------------------------------------------


@pytest.mark.parametrize("token", ["dl_abc\u2019", "dl_\u00e9", "dl_a\nb", "dl a", "dl_\x7f"])
def test_a_token_that_is_not_printable_ascii_is_a_config_error(token: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Client("http://127.0.0.1:1", token)
    message = str(raised.value)
    assert "--token" in message and "DANLU_TOKEN" in message, message
    assert token not in message  # a secret is not echoed


def test_the_cli_refuses_a_non_ascii_token_in_one_line(tmp_path: Path) -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    jobs_cli.register(app)
    result = CliRunner().invoke(
        app,
        ["ls", "--url", "http://127.0.0.1:1", "--token", "dl_abc\u2019"],
        env={"DANLU_HOME": str(tmp_path), "DANLU_URL": "", "DANLU_TOKEN": ""},
    )
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--token" in lines[0], lines


# -- find_server: undecodable files ---------------------------------------------------------------


def test_an_undecodable_server_json_is_no_server(tmp_path: Path) -> None:
    (tmp_path / "server.json").write_bytes(b'\xff\xfe{"url":1}')
    with pytest.raises(NoServerError, match="unreadable"):
        find_server(tmp_path)


def test_an_undecodable_admin_token_is_no_token(tmp_path: Path) -> None:
    (tmp_path / "server.json").write_text('{"url": "http://127.0.0.1:1"}')
    (tmp_path / "admin.token").write_bytes(b"\xff\xfe")
    assert find_server(tmp_path) == ("http://127.0.0.1:1", None)
