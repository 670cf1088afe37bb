"""The CLI's output and flags, against a stub server:

- ``cordon`` / ``drain``'s reply line escapes the text after the node's name as one string:
  escaped apart, a cordon reason ``[/ops`` and a scheduled drain's reason ``x]`` made one
  Rich tag between them (a MarkupError traceback, or both reasons gone);
- ``danlu logs`` into a full disk is an error line (exit 2), not a traceback, and a reader
  that has gone (``| head``) exits 141, not 1 (which says the job FAILED);
- ``webhook add --state failed,cancelled`` takes a,b as ``ls`` and ``events`` do (the server
  read it as one unknown state, ``states.0``), and an unknown state names ``--state``;
- ``user token`` never prints a token the server sent with control characters (an ESC
  sequence reached the terminal raw);
- ``--quota-gpus abc`` says what to write, ``--quota-memory 5xyz`` names its flag once.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from cli_fake_api import TOKEN, invoke, no_raw_control

from danlu.cli import job_views
from danlu.cli import jobs as jobs_cli
from danlu.cli import main as main_cli
from danlu.client import Client
from danlu.core.state import JobState

T0 = 1_796_131_413.0
Reply = Any | Callable[[httpx.Request], httpx.Response]


def serve(monkeypatch: pytest.MonkeyPatch, replies: Mapping[tuple[str, str], Reply]) -> list[Any]:
    """Every command's client talks to a stub answering ``(method, path)`` (without
    ``/api/v1``) with its JSON reply (a callable: its response to the request), else a 404;
    returns the JSON bodies of the requests it answered, in order."""
    bodies: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        key = (request.method, request.url.path.removeprefix("/api/v1"))
        if key not in replies:
            return httpx.Response(404, json={"type": "NotFoundError", "message": str(key)})
        bodies.append(json.loads(request.content) if request.content else None)
        reply = replies[key]
        return reply(request) if callable(reply) else httpx.Response(200, json=reply)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    return bodies


def flat(text: str) -> str:
    """``text`` on one line, as a reader sees a message Rich wrapped."""
    return " ".join(text.split())


# -- the node line ------------------------------------------------------------------------------


@pytest.mark.parametrize("cordoned_for", ["[/ops", "[ops ticket"])
def test_a_cordon_reply_shows_both_reasons_whole(
    monkeypatch: pytest.MonkeyPatch, cordoned_for: str
) -> None:
    node = {
        "name": "node-0",
        "state": "cordoned",
        "cordon_reason": cordoned_for,
        "close_at": T0,
        "close_action": "drain",
        "close_reason": "see x]",
    }
    serve(monkeypatch, {("POST", "/cluster/nodes/node-0/drain"): node})
    code, out, err = invoke(main_cli.app, "drain", "node-0", "--at", "+1h")
    assert code == 0, err
    assert f"node-0: cordoned ({cordoned_for}); drain at" in flat(out), out
    assert flat(out).endswith(": see x]"), out


def test_a_gpu_cordon_reply_shows_its_reason_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    node = {
        "name": "node-0",
        "state": "ready",
        "gpus": [{"index": 1, "state": "cordoned", "cordon_reason": "[/x] \x1b[2J"}],
    }
    serve(monkeypatch, {("POST", "/cluster/nodes/node-0/cordon"): node})
    code, out, err = invoke(main_cli.app, "cordon", "node-0", "--gpu", "1")
    assert code == 0, err
    assert "node node-0 GPU 1: cordoned ([/x] \\x1b[2J)" in flat(out)
    no_raw_control(out)


# -- danlu logs when stdout cannot be written ---------------------------------------------------


def _logs(request: httpx.Request) -> httpx.Response:
    offset = int(request.url.params.get("offset", 0))
    data = b"hello\n"[offset:]
    return httpx.Response(
        200, content=data, headers={"X-Danlu-Log-Offset": str(offset + len(data))}
    )


def test_logs_into_a_full_disk_is_an_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    serve(monkeypatch, {("GET", "/jobs/j1/logs"): _logs})

    def full(data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(job_views, "write_bytes", full)
    code, _, err = invoke(main_cli.app, "logs", "j1")
    assert code == 2
    assert "error: cannot write the output: No space left on device" in flat(err)


def test_logs_to_a_reader_that_has_gone_exits_as_sigpipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not 1: with --follow, 1 says the job FAILED."""
    serve(monkeypatch, {("GET", "/jobs/j1/logs"): _logs})

    def gone(data: bytes) -> None:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(job_views, "write_bytes", gone)
    code, _, err = invoke(main_cli.app, "logs", "j1")
    assert code == 141
    assert "Traceback" not in err


def test_logs_still_write_the_bytes_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    serve(monkeypatch, {("GET", "/jobs/j1/logs"): _logs})
    code, out, _ = invoke(main_cli.app, "logs", "j1")
    assert (code, out) == (0, "hello\n")


# -- webhook add --state ------------------------------------------------------------------------

HOOK = {"id": "w1", "url": "https://hooks.example/danlu", "states": ["FAILED"], "secret": "s"}


def test_webhook_add_takes_states_as_a_comma_list(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = serve(monkeypatch, {("POST", "/webhooks"): HOOK})
    url = "https://hooks.example/danlu"
    code, _, err = invoke(
        main_cli.app, "webhook", "add", url, "--state", "failed, cancelled", "--state", "Running"
    )
    assert code == 0, err
    assert bodies[0]["states"] == ["FAILED", "CANCELLED", "RUNNING"]


@pytest.mark.parametrize("given", ["bogus", "failed,", ""])
def test_webhook_add_names_an_unknown_state_before_asking(
    monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    bodies = serve(monkeypatch, {("POST", "/webhooks"): HOOK})
    code, _, err = invoke(main_cli.app, "webhook", "add", "https://h.example/x", "--state", given)
    assert code == 2
    assert "error: --state:" in flat(err) and "is not a job state" in flat(err)
    assert all(state.value in flat(err) for state in JobState)
    assert bodies == []


# -- user token ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sent", ["dl_ab_x\x1b]52;c;aGk=\x07", "dl_ab_x\ny", "dl ab", ""])
def test_user_token_never_prints_a_token_with_control_characters(
    monkeypatch: pytest.MonkeyPatch, sent: str
) -> None:
    serve(monkeypatch, {("POST", "/users/bob/tokens"): {"token": sent}})
    code, out, err = invoke(main_cli.app, "user", "token", "bob")
    assert code == 2
    assert out == ""
    assert "error: the server sent" in flat(err) and "token for bob" in flat(err)
    no_raw_control(err)
    if sent:
        assert sent not in err  # the secret is never echoed


def test_user_token_prints_a_token_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    serve(monkeypatch, {("POST", "/users/bob/tokens"): {"token": "dl_ab12_x-Y_z"}})
    code, out, _ = invoke(main_cli.app, "user", "token", "bob")
    assert (code, out) == (0, "dl_ab12_x-Y_z\n")


# -- quota flags --------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [("project", "add", "p"), ("user", "set", "u")])
def test_quota_gpus_that_is_no_number_says_what_to_write(command: tuple[str, ...]) -> None:
    code, _, err = invoke(main_cli.app, *command, "--quota-gpus", "abc", "--url", "http://x")
    assert code == 2
    assert "error: --quota-gpus: give a number of GPUs >= 0 (e.g. 8 or 0.5) or 'none'" in flat(err)
    assert "could not convert" not in err


def test_quota_memory_names_its_flag_once() -> None:
    code, _, err = invoke(
        main_cli.app, "project", "set", "p", "--quota-memory", "5xyz", "--url", "http://x"
    )
    assert code == 2
    assert flat(err).startswith("error: --quota-memory: '5xyz' is not a byte size"), err
    assert flat(err).count("--quota-memory") == 1


# -- sim: the synthetic workload's flags with --workload ----------------------------------------


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    path = tmp_path / "wl.csv"
    path.write_text("name,submit_time,gpus,duration\na,0,1,600\nb,0,2,600\n")
    return path


SIM_ARGS = {
    "run": ["--quiet"],
    "compare": ["--quiet", "--policies", "fifo"],
    "plan": ["--target", "avg_jct<=1d", "--max-nodes", "2"],
}


@pytest.mark.parametrize("command", sorted(SIM_ARGS))
@pytest.mark.parametrize(("flag", "value"), [("--jobs", "5000"), ("--seed", "7"), ("--seed", "0")])
def test_sim_refuses_a_synthetic_workload_flag_with_a_workload_file(
    workload: Path, command: str, flag: str, value: str
) -> None:
    """The file's jobs were simulated, --jobs and --seed silently read as nothing."""
    args = ["sim", command, "--workload", str(workload), *SIM_ARGS[command], flag, value]
    code, out, err = invoke(main_cli.app, *args)
    assert code == 2, out
    said = flat(err)
    assert f"error: {flag} shapes the built-in synthetic workload" in said
    assert f"leave out {flag}" in said


@pytest.mark.parametrize("command", sorted(SIM_ARGS))
def test_sim_takes_each_workload_alone(workload: Path, command: str) -> None:
    code, out, err = invoke(
        main_cli.app, "sim", command, "--workload", str(workload), *SIM_ARGS[command]
    )
    assert code == 0, err
    assert "wl: 2 jobs" in flat(out)
    code, out, err = invoke(
        main_cli.app, "sim", command, "--jobs", "3", "--seed", "4", *SIM_ARGS[command]
    )
    assert code == 0, err
    assert "synthetic-3-seed4: 3 jobs" in flat(out)


# -- --json into a full disk --------------------------------------------------------------------


class FullDisk:
    """A stdout on a full disk: what is written is refused."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_json_into_a_full_disk_is_an_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    serve(monkeypatch, {("GET", "/jobs"): []})
    monkeypatch.setattr(jobs_cli, "sys", SimpleNamespace(stdout=FullDisk()))
    code, _, err = invoke(main_cli.app, "ls", "--json")
    assert code == 2
    assert "error: cannot write the output: No space left on device" in flat(err)
