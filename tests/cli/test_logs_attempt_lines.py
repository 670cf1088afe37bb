"""``danlu logs``' lines where each attempt (run) of a job begins (:mod:`danlu.cli.log_attempts`):
placed at the byte each run began, whatever the chunks the log comes in; a follow asks again
after a pause, so a run that starts while following gets its line; none past a truncation;
on a terminal by default, never into a pipe or a file unless asked, and none from a server
without ``GET /jobs/{id}/logs/runs``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_fake_api import TOKEN, FakeApi
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli.log_attempts import PAUSE, AttemptMarks, run_marks, separator
from danlu.cli.main import app
from danlu.client import Client
from danlu.client.errors import ServerUnavailable
from danlu.client.rest import LOG_TRUNCATED_NOTE

LOG = b"one\ntwo, unfinished" + b"three\n" + b"four\n"
RUNS = [
    {"attempt": 1, "offset": 0, "started_at": 1000.0},
    {"attempt": 2, "offset": 19, "started_at": 2000.0},
    {"attempt": 4, "offset": 25, "started_at": 3000.0},
]
MARK = re.compile(r"── attempt (\d+) \(started [0-9-]+ [0-9:]+\) ──")


def _written(runs: list[dict[str, Any]], chunks: list[bytes]) -> str:
    out: list[bytes] = []
    marks = AttemptMarks(lambda: runs, out.append)
    for chunk in chunks:
        marks.write(chunk)
    marks.finish()
    return b"".join(out).decode()


def _cut(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 5, 19, 20, 1000])
def test_each_run_after_the_first_gets_its_line_where_it_began(size: int) -> None:
    text = _written(RUNS, _cut(LOG, size))
    lines = text.split("\n")
    assert lines[0] == "one" and lines[1] == "two, unfinished", text
    assert [m.group(1) for m in map(MARK.fullmatch, lines) if m] == ["2", "4"], text
    assert lines[3] == "three" and lines[5] == "four", text
    assert MARK.sub("", text).replace("\n", "") == LOG.decode().replace("\n", "")


def test_a_run_that_wrote_nothing_still_gets_its_line() -> None:
    runs = [*RUNS, {"attempt": 5, "offset": len(LOG), "started_at": 4000.0}]
    text = _written(
        [*runs[:2], {"attempt": 3, "offset": 19, "started_at": 1500.0}, *runs[2:]], [LOG]
    )
    marks = [m.group(1) for m in map(MARK.fullmatch, text.split("\n")) if m]
    assert marks == ["2", "3", "4", "5"], text  # 3 at the same byte as 2; 5 at the end
    assert text.endswith("four\n" + separator(run_marks(runs)[-1]) + "\n"), text


def test_a_log_of_one_run_is_written_as_it_is() -> None:
    assert _written(RUNS[:1], _cut(LOG, 3)) == LOG.decode()
    assert _written([], [LOG]) == LOG.decode()


@pytest.mark.parametrize(
    "reply",
    [[{"attempt": "2", "offset": 3}], [{"attempt": 2, "offset": -1}], [7], [{"offset": True}]],
)
def test_a_reply_of_another_shape_is_no_line_and_no_error(reply: list[Any]) -> None:
    assert _written(reply, [LOG]) == LOG.decode()


def test_a_follow_asks_again_after_a_pause_and_marks_a_run_started_meanwhile() -> None:
    now = [0.0]
    known: list[dict[str, Any]] = RUNS[:1]
    asked: list[int] = []

    def runs() -> list[dict[str, Any]]:
        asked.append(1)
        return known

    out: list[bytes] = []
    marks = AttemptMarks(runs, out.append, clock=lambda: now[0])
    marks.follow(b"one\n")
    now[0] += PAUSE / 10
    marks.follow(b"two\n")  # output flowing: not asked again
    assert len(asked) == 2  # at the start, and at the follow's first bytes
    known = [*RUNS[:1], {"attempt": 2, "offset": 8, "started_at": 2000.0}]
    now[0] += PAUSE  # the run exited; the next one starts after the pause
    marks.follow(b"three\n")
    assert len(asked) == 3
    text = b"".join(out).decode()
    assert text.startswith("one\ntwo\n── attempt 2 (started ") and text.endswith("──\nthree\n")


def test_a_follow_whose_question_fails_goes_on_with_what_it_knew() -> None:
    now = [0.0]
    calls = [0]

    def runs() -> list[dict[str, Any]]:
        calls[0] += 1
        if calls[0] > 1:
            raise ServerUnavailable("the server restarts")
        return RUNS

    out: list[bytes] = []
    marks = AttemptMarks(runs, out.append, clock=lambda: now[0])
    for chunk in _cut(LOG, 4):
        now[0] += PAUSE
        marks.follow(chunk)
    marks.finish()
    assert [m.group(1) for m in map(MARK.fullmatch, b"".join(out).decode().split("\n")) if m] == [
        "2",
        "4",
    ]


def test_no_line_past_a_truncation_note() -> None:
    out: list[bytes] = []
    marks = AttemptMarks(lambda: RUNS, out.append, clock=lambda: 0.0)
    note = LOG_TRUNCATED_NOTE
    marks.follow(b"one\n" + note[:10])
    marks.follow(note[10:] + LOG)  # the log read again from its first byte
    marks.finish()
    assert b"".join(out) == b"one\n" + note + LOG


def _serve(
    monkeypatch: pytest.MonkeyPatch,
    api: FakeApi,
    runs: list[dict[str, Any]] | None,
    *,
    terminal: bool,
) -> None:
    """The CLI's client talks to ``api``, which answers ``GET /jobs/{id}/logs/runs`` with
    ``runs`` (None: a server without that route, which answers 404); stdout is a terminal
    or not."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs/runs") and runs is not None:
            return httpx.Response(200, json=runs)
        return api.handler(request)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    monkeypatch.setattr(jobs_cli, "console", Console(width=200, force_terminal=terminal))


def _job(api: FakeApi) -> str:
    job = api.add_job("thrice", "SUCCEEDED", exit_code=0)
    api.logs[job["id"]] = LOG
    api.log_chunk = 7
    return str(job["id"])


@pytest.mark.parametrize("follow", [[], ["-f"]], ids=["logs", "logs-follow"])
def test_on_a_terminal_the_lines_are_there_by_default(
    monkeypatch: pytest.MonkeyPatch, follow: list[str]
) -> None:
    api = FakeApi()
    job_id = _job(api)
    _serve(monkeypatch, api, RUNS, terminal=True)
    result = CliRunner().invoke(app, ["logs", *follow, job_id])
    assert result.exit_code == 0, result.output
    text = result.stdout_bytes.decode()
    assert [m.group(1) for m in map(MARK.fullmatch, text.split("\n")) if m] == ["2", "4"], text
    result = CliRunner().invoke(app, ["logs", *follow, "--no-separators", job_id])
    assert result.stdout_bytes == LOG


@pytest.mark.parametrize("follow", [[], ["-f"]], ids=["logs", "logs-follow"])
def test_into_a_pipe_the_bytes_are_as_they_are_unless_asked(
    monkeypatch: pytest.MonkeyPatch, follow: list[str]
) -> None:
    api = FakeApi()
    job_id = _job(api)
    _serve(monkeypatch, api, RUNS, terminal=False)
    result = CliRunner().invoke(app, ["logs", *follow, job_id])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == LOG
    assert not any(r.url.path.endswith("/logs/runs") for r in api.requests)  # not even asked
    result = CliRunner().invoke(app, ["logs", *follow, "--separators", job_id])
    assert "── attempt 2" in result.stdout_bytes.decode()


def test_a_server_without_the_route_prints_the_log_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi()
    job_id = _job(api)
    _serve(monkeypatch, api, None, terminal=True)
    result = CliRunner().invoke(app, ["logs", job_id])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == LOG


def test_a_job_that_does_not_exist_is_still_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi()
    _serve(monkeypatch, api, None, terminal=True)
    result = CliRunner().invoke(app, ["logs", "abcdef123456"])
    assert result.exit_code == 2, result.output
    assert "not found" in result.stderr
