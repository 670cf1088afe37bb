"""The CLI's attached commands: a job's bytes pass through ``danlu run`` and
``danlu logs`` unchanged; ``danlu run`` from a removed directory is an error line; a signal
while the submission is on its way cancels the job once it is known (a second one leaves,
naming it); followers (``logs -f``, ``wait``, ``run``) wait out a control-plane restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time as real_time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from cli_fake_api import TOKEN, FakeApi
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli import run as run_cli
from danlu.client import Client, rest
from danlu.client.errors import ServerUnavailable

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
URL = "http://fake"
DATA = b"caf\xe9 latin-1\n\x00\x01\xff\xfe binary\n" + bytes(range(256)) * 8
"""Output that is not UTF-8: each invalid byte used to come back as U+FFFD."""


class FakeTime:
    """The ``time`` module as the client sees it: ``sleep`` advances ``now``."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(real_time, name)


def app() -> typer.Typer:
    """A bare app of ``run`` and the job commands."""
    cli = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    run_cli.register(cli)
    jobs_cli.register(cli)
    return cli


def serve(monkeypatch: pytest.MonkeyPatch, handler: Callable[[httpx.Request], Any]) -> None:
    """Every command's client talks to ``handler``."""

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client(URL, TOKEN, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)


# -- 1. bytes ------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["logs"], ["logs", "-f"]], ids=["logs", "logs-follow"])
def test_logs_write_the_jobs_bytes_unchanged(
    monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    api = FakeApi()
    api.log_chunk = 1000  # several chunks, cut anywhere
    job = api.add_job("binary", "SUCCEEDED", exit_code=0)
    api.logs[job["id"]] = DATA
    serve(monkeypatch, api.handler)
    result = CliRunner().invoke(app(), [*args, job["id"]])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == DATA


def test_run_writes_the_jobs_bytes_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi()
    api.submitted_progress = ["SUCCEEDED"]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs"):
            for job_id in api.logs:
                api.logs[job_id] = api.logs[job_id] or DATA
        return api.handler(request)

    serve(monkeypatch, handler)
    result = CliRunner().invoke(app(), ["run", "--workdir", "/tmp", "--", "cat", "x.bin"])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == DATA
    assert "submitted" in result.stderr


def test_client_text_api_still_decodes() -> None:
    api = FakeApi()
    job = api.add_job("text", "SUCCEEDED")
    api.logs[job["id"]] = "héllo\n".encode() + b"\xff\n"
    client = Client(URL, TOKEN, transport=api.transport())
    assert "".join(client.read_logs(job["id"])) == "héllo\n\ufffd\n"
    assert b"".join(client.read_log_bytes(job["id"])) == api.logs[job["id"]]


# -- 2. a removed current directory --------------------------------------------------------


def test_run_from_a_removed_directory_is_an_error_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    api = FakeApi()
    serve(monkeypatch, api.handler)
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    result = CliRunner().invoke(app(), ["run", "--", "true"])
    assert result.exit_code == 2, (result.exception, result.output)
    assert "error:" in result.stderr and "no longer exists" in result.stderr
    assert "--workdir" in result.stderr
    assert api.jobs == {}


# -- 3. a signal while the submission is on its way -----------------------------------------

SLOW_SUBMIT = """
import sys, time
from pathlib import Path
import httpx, typer
from cli_fake_api import TOKEN, FakeApi
from danlu.cli import jobs as jobs_cli
from danlu.cli import run as run_cli
from danlu.client import Client

state, go = Path(sys.argv[1]), Path(sys.argv[2])
api = FakeApi()
api.submitted_progress = ["RUNNING"]

def handler(request):
    if request.method == "POST" and request.url.path.endswith("/jobs"):
        sys.stderr.write("submitting\\n")
        sys.stderr.flush()
        for _ in range(1200):  # the answer comes once the test says so
            if go.exists():
                break
            time.sleep(0.05)
    return api.handler(request)

jobs_cli.client_factory = lambda h, u, t: Client(
    "http://fake", TOKEN, transport=httpx.MockTransport(handler)
)
cli = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
run_cli.register(cli)
cli.command("noop", hidden=True)(lambda: None)
try:
    cli(["run", "--name", "sleeper", "--workdir", "/tmp", "--", "sleep", "60"])
finally:
    state.write_text(" ".join(f"{i} {j['state']}" for i, j in api.jobs.items()))
"""


def start_slow_submit(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """``danlu run`` whose submission is on its way (answered once the go file exists)."""
    state, go = tmp_path / "state", tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(HERE)]))
    child = subprocess.Popen(
        [sys.executable, "-c", SLOW_SUBMIT, str(state), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert child.stderr is not None
    first = child.stderr.readline().decode()
    assert first == "submitting\n", first
    return child, state, go


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["INT", "TERM", "HUP"]
)
def test_a_signal_during_the_submission_cancels_the_job(
    tmp_path: Path, sig: signal.Signals
) -> None:
    child, state, go = start_slow_submit(tmp_path)
    child.send_signal(sig)
    go.touch()
    _, err = child.communicate(timeout=60)
    text = err.decode()
    assert child.returncode == 128 + sig, text
    job_id, job_state = state.read_text().split()
    assert job_state == "CANCELLED", text
    assert f"job {job_id} submitted" in text and f"job {job_id} cancelled" in text, text
    assert "Traceback" not in text, text


def test_a_second_ctrl_c_during_the_submission_leaves_naming_the_job(tmp_path: Path) -> None:
    child, _, _ = start_slow_submit(tmp_path)
    child.send_signal(signal.SIGINT)
    real_time.sleep(0.5)  # the first one handled: two pending SIGINTs would be one
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=30)  # never answered: it leaves by itself
    text = err.decode()
    assert child.returncode == 130, text
    assert "may have been submitted" in text and "danlu ls --name sleeper" in text, text
    assert "Traceback" not in text, text


# -- 4. a control-plane restart ------------------------------------------------------------


class Broken(httpx.SyncByteStream):
    """A follow stream that brings ``data``, then breaks (the server going away)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self.data
        raise httpx.RemoteProtocolError("peer closed connection (incomplete chunked read)")


class Restart:
    """A server with a RUNNING job whose follow stream breaks after ``cut`` bytes; then
    ``down`` requests find no server; then the job is SUCCEEDED (or, with ``down`` None,
    the server never comes back)."""

    def __init__(self, cut: int, down: int | None) -> None:
        self.cut = cut
        self.down = down
        self.follows: list[int] = []
        self.refused = 0
        self.broken = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST" and path.endswith("/jobs"):
            return httpx.Response(201, json={"id": "abc", "state": "PENDING"})
        if self.broken and (self.down is None or self.refused < self.down):
            self.refused += 1
            raise httpx.ConnectError("connection refused", request=request)
        if path.endswith("/logs"):
            offset = int(request.url.params["offset"])
            if request.url.params.get("follow") == "true":
                self.follows.append(offset)
                if not self.broken:
                    self.broken = True
                    return httpx.Response(200, stream=Broken(DATA[offset : self.cut]))
            return httpx.Response(200, content=DATA[offset:])
        if path.endswith("/cancel"):
            return httpx.Response(200, json={"id": "abc", "state": "CANCELLED"})
        state = "SUCCEEDED" if self.broken else "RUNNING"
        return httpx.Response(200, json={"id": "abc", "state": state, "exit_code": 0})


def test_follow_resumes_from_the_offset_after_a_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeTime()
    monkeypatch.setattr(rest, "time", clock)
    server = Restart(cut=5, down=3)  # cut in the middle of "café"'s \xe9... and the rest
    client = Client(URL, TOKEN, transport=httpx.MockTransport(server))
    assert b"".join(client.follow_log_bytes("abc")) == DATA  # nothing lost or twice
    assert server.follows == [0, 5]
    assert server.refused == 3


def test_follow_gives_up_once_the_server_stays_away(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeTime()
    monkeypatch.setattr(rest, "time", clock)
    client = Client(URL, TOKEN, transport=httpx.MockTransport(Restart(cut=5, down=None)))
    got: list[bytes] = []
    with pytest.raises(ServerUnavailable, match="cannot reach"):
        for chunk in client.follow_log_bytes("abc"):
            got.append(chunk)
    assert b"".join(got) == DATA[:5]
    assert clock.now >= rest.RECONNECT_FOR


def test_wait_keeps_waiting_across_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeTime()
    monkeypatch.setattr(rest, "time", clock)
    looks = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        looks[0] += 1
        if 2 <= looks[0] <= 4:
            raise httpx.ConnectError("connection refused", request=request)
        state = "RUNNING" if looks[0] == 1 else "SUCCEEDED"
        return httpx.Response(200, json={"id": "abc", "state": state, "exit_code": 0})

    client = Client(URL, TOKEN, transport=httpx.MockTransport(handler))
    assert [j["state"] for j in client.wait(["abc"], poll=1)] == ["SUCCEEDED"]
    assert looks[0] == 5


def test_logs_follow_waits_out_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest, "time", FakeTime())
    serve(monkeypatch, Restart(cut=5, down=3))
    result = CliRunner().invoke(app(), ["logs", "-f", "abc"])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == DATA


def test_run_names_its_job_when_the_server_stays_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest, "time", FakeTime())
    serve(monkeypatch, Restart(cut=5, down=None))
    result = CliRunner().invoke(app(), ["run", "--workdir", "/tmp", "--", "true"])
    assert result.exit_code == 2, result.output
    assert result.stdout_bytes == DATA[:5]
    assert "job abc may still be running" in result.stderr
    assert "danlu cancel abc" in result.stderr
    assert "error: cannot reach" in result.stderr
