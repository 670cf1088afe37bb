"""The commands' output into a pipe or a file, and a few of their lines' wordings:

- ``danlu events | grep``: at 80 columns the one-event-a-line fallback was folded by Rich
  (``... (exit code`` on one line, ``1)`` on the next), so ``grep -c "exit code 1)"`` found
  none; now one event a line, never folded, as ``danlu events -f`` prints them.
- ``danlu metrics JOB | cat``: the table's cells were cut to ``20:4…``, ``0.45…`` at 80
  columns; into a pipe the table is as wide as its cells. A checkpoint record (``step``,
  ``time``, ``checkpoint_step`` only) read as a row of ``-``: it has a ``checkpoint`` column.
- ``danlu cancel``/``danlu hold`` of a running job said ``cancelled job X: RUNNING``, as if
  nothing happened: the API answers RUNNING while the run is being stopped; the line says so.
- ``danlu show``'s events: a FAILED row's reason began with ``(`` (``(exit code 1); ...``).
- ``--quota-gpus 1`` read ``at most 1 GPUs``; a bad ``--fake-gpus`` was named twice in its
  error (``--fake-gpus (DANLU_FAKE_GPUS): --fake-gpus '4*80GiB': ...``).

Against the in-memory API of ``cli_fake_api``.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from cli_fake_api import TOKEN, FakeApi, invoke, jobs_app, metrics_and_events_app, serve_commands
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import admin as admin_cli
from danlu.cli import events as events_cli
from danlu.cli import jobs as jobs_cli
from danlu.cli import metrics as metrics_cli
from danlu.cli import server as server_cli
from danlu.cli.reply_views import gpu_count
from danlu.client import Client

FAILED_REASON = "failed (exit code 1); out of restarts (1 of 1)"
"""A FAILED job's last event's reason, as the server writes it."""

APP = metrics_and_events_app()


def _event(number: int, old: str | None, new: str, reason: str) -> dict[str, Any]:
    return {
        "id": number,
        "time": 1_796_580_860.0 + number,
        "job_id": f"{number:012x}",
        "job_name": "long-job-name-for-the-walk",
        "user": "alice",
        "project": "vision-research",
        "old": old,
        "new": new,
        "reason": reason,
    }


def _serve_events(monkeypatch: pytest.MonkeyPatch, events: list[dict[str, Any]]) -> None:
    """Every command's client talks to an API whose ``GET /events`` answers ``events``."""
    api = FakeApi()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/events":
            return httpx.Response(200, json=events)
        return api.handler(request)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)


def _pipe_console(width: int = 80) -> Console:
    """A console printing to the CliRunner's stdout (not a terminal), ``width`` wide."""
    return Console(width=width, force_terminal=False)


EVENTS = [
    _event(1, None, "PENDING", "submitted"),
    _event(2, "PENDING", "RUNNING", "running on node-0:0,node-0:1,node-0:2,node-0:3"),
    _event(3, "RUNNING", "FAILED", FAILED_REASON),
]


def test_events_into_a_pipe_are_one_event_a_line_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    _serve_events(monkeypatch, EVENTS)
    monkeypatch.setattr(events_cli, "console", _pipe_console(80))
    code, out, err = invoke(APP, "events", "--state", "FAILED")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == len(EVENTS), out
    assert sum("exit code 1)" in line for line in lines) == 1, out  # `| grep -c` finds it
    assert lines[2].endswith("RUNNING -> FAILED (exit code 1); out of restarts (1 of 1)")
    assert all(line == events_cli.line(event) for line, event in zip(lines, EVENTS, strict=True))


def test_events_into_a_wide_pipe_are_lines_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table's reason column folds a long reason onto a second row: no table in a pipe."""
    _serve_events(monkeypatch, EVENTS)
    monkeypatch.setattr(events_cli, "console", _pipe_console(300))
    code, out, _ = invoke(APP, "events")
    assert code == 0
    assert "│" not in out and len(out.splitlines()) == len(EVENTS), out


def test_events_on_a_terminal_are_still_a_table(monkeypatch: pytest.MonkeyPatch) -> None:
    _serve_events(monkeypatch, EVENTS)
    monkeypatch.setattr(events_cli, "console", Console(width=300, force_terminal=True))
    code, out, _ = invoke(APP, "events")
    assert code == 0
    assert "│" in out and "vision-research" in out


METRIC_RECORDS = [
    {
        "step": 70,
        "time": 1_796_580_860.25,
        "loss": 0.456789,
        "grad_norm": 1.234567,
        "learning_rate": 0.000123456,
        "tokens_per_second": 123456.789,
        "gpu_memory_fraction": 0.876543,
    },
    {"step": 80, "time": 1_796_580_870.5, "checkpoint_step": 80},
]


def _metrics(monkeypatch: pytest.MonkeyPatch, shown: Console, *flags: str) -> str:
    api = serve_commands(monkeypatch)
    job = api.add_job("train", "RUNNING")["id"]
    api.add_metrics(job, METRIC_RECORDS)
    monkeypatch.setattr(metrics_cli, "console", shown)
    code, out, err = invoke(APP, "metrics", job, *flags)
    assert (code, err) == (0, ""), err
    return out


def test_metrics_into_a_pipe_show_every_cell_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _metrics(monkeypatch, _pipe_console(80))
    assert "…" not in out, out
    header = next(line for line in out.splitlines() if "step" in line)
    for name in ("grad_norm", "learning_rate", "tokens_per_second", "gpu_memory_fraction"):
        assert name in header, out
    row = next(line for line in out.splitlines() if " 70 " in line)
    for value in ("0.4568", "1.235", "0.0001235", "1.235e+05", "0.8765"):
        assert value in row, out
    assert len({len(line) for line in out.splitlines()}) == 1  # one table, its rows aligned


def test_metrics_on_a_narrow_terminal_are_fitted_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = _metrics(monkeypatch, Console(width=80, force_terminal=True, color_system=None))
    assert max(len(line) for line in out.splitlines()) <= 80


def test_a_checkpoint_record_has_its_checkpoint_column(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _metrics(monkeypatch, Console(width=300))
    lines = out.splitlines()
    header = next(line for line in lines if "step" in line)
    cells = [c.strip() for c in header.split("┃")[1:-1]]
    assert cells[-1] == "checkpoint" and "checkpoint_step" not in cells, out
    saved = next(line for line in lines if " 80 " in line)
    assert [c.strip() for c in saved.split("│")[1:-1]][-1] == "80", out


def test_metrics_json_keeps_the_checkpoint_record(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _metrics(monkeypatch, Console(width=300), "--json")
    assert '"checkpoint_step": 80' in out


def test_a_followed_checkpoint_record_says_its_checkpoint() -> None:
    line = metrics_cli.line(METRIC_RECORDS[1], ["loss"])
    assert line.endswith("checkpoint_step 80"), line


def _stays_running(monkeypatch: pytest.MonkeyPatch, state: str = "RUNNING") -> tuple[str, Any]:
    """A job in ``state`` whose cancel the API answers as the server does for a run being
    stopped: still in that state (the fake would end it at once)."""
    api = serve_commands(monkeypatch)
    monkeypatch.setattr(jobs_cli, "console", Console(width=300))
    job = api.add_job("train", state)
    handler = api.handler

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/cancel"):
            return httpx.Response(200, json=api.jobs[job["id"]])
        return handler(request)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(answer))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    return job["id"], api


JOBS_APP = jobs_app()


@pytest.mark.parametrize("state", ["RUNNING", "PREEMPTING"])
def test_cancel_of_a_running_job_says_it_is_being_stopped(
    monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    job, _ = _stays_running(monkeypatch, state)
    code, out, _ = invoke(JOBS_APP, "cancel", job)
    assert code == 0
    assert out == (
        f"cancelling job {job}: {state}, stopping it (SIGTERM, then SIGKILL after its grace)\n"
    )


def test_cancel_json_is_the_reply_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    job, _ = _stays_running(monkeypatch)
    code, out, _ = invoke(JOBS_APP, "cancel", job, "--json")
    assert code == 0 and out.lstrip().startswith("{") and '"state": "RUNNING"' in out


def test_cancel_of_a_queued_job_says_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    api = serve_commands(monkeypatch)
    monkeypatch.setattr(jobs_cli, "console", Console(width=300))
    job = api.add_job("train", "PENDING")["id"]
    assert invoke(JOBS_APP, "cancel", job)[1] == f"cancelled job {job}: CANCELLED\n"


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ("RUNNING", ": RUNNING, stopping it to wait (checkpoint first)\n"),
        ("PENDING", ": PENDING\n"),
    ],
)
def test_hold_says_a_running_job_is_stopped_to_wait(
    monkeypatch: pytest.MonkeyPatch, state: str, said: str
) -> None:
    api = serve_commands(monkeypatch)
    monkeypatch.setattr(jobs_cli, "console", Console(width=300))
    job = api.add_job("train", state)["id"]
    code, out, _ = invoke(JOBS_APP, "hold", job)
    assert code == 0 and out == f"held job {job}{said}"
    code, out, _ = invoke(JOBS_APP, "hold", job, "--json")
    assert code == 0 and f'"state": "{state}"' in out


def test_show_s_failed_event_reads_without_a_leading_parenthesis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = serve_commands(monkeypatch)
    monkeypatch.setattr(jobs_cli, "console", Console(width=300))
    job = api.add_job("train", "RUNNING", started_at=1500.0)
    api.end_job(job["id"], "FAILED", FAILED_REASON)
    code, out, _ = invoke(JOBS_APP, "show", job["id"])
    assert code == 0
    row = [r for r in out.splitlines() if "out of restarts" in r and "│" in r]
    assert len(row) == 1, out
    assert [c.strip() for c in row[0].split("│")[-3:-1]] == [
        "FAILED",
        "exit code 1; out of restarts (1 of 1)",
    ], row[0]


@pytest.mark.parametrize(
    ("reason", "cell"),
    [
        (FAILED_REASON, "exit code 1; out of restarts (1 of 1)"),
        ("failed (exit code 1)", "exit code 1"),
        ("failed (unclosed", "failed (unclosed"),  # nothing to unwrap: the reason as it is
        ("failed: out of memory (exit code 1)", "out of memory (exit code 1)"),
    ],
)
def test_the_events_table_s_reason_beside_failed(reason: str, cell: str) -> None:
    printed = io.StringIO()
    event = _event(3, "RUNNING", "FAILED", reason)
    Console(file=printed, width=300).print(events_cli.table([event]))
    row = next(r for r in printed.getvalue().splitlines() if "000000000003" in r)
    assert row.split("│")[-2].strip() == cell, row


@pytest.mark.parametrize(
    ("quota", "said"), [(1, "at most 1 GPU"), (0.5, "at most 0.5 GPU"), (2, "at most 2 GPUs")]
)
def test_a_gpu_quota_of_one_is_one_gpu(quota: float, said: str) -> None:
    line = admin_cli._user_line({"name": "alice", "role": "user", "quota_gpus": quota})
    assert line == f"user alice (user), {said}"
    assert gpu_count(0) == "0 GPUs"


SERVER_APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
server_cli.register(SERVER_APP)


@pytest.mark.parametrize("command", ["up", "server"])
def test_a_bad_fake_gpus_is_named_once(tmp_path: Path, command: str) -> None:
    home = tmp_path / "home"
    result = CliRunner().invoke(
        SERVER_APP, [command, "--home", str(home), "--fake-gpus", "4*80GiB"]
    )
    assert result.exit_code == 2, result.output
    err = " ".join(result.stderr.split())
    assert err.startswith("error: --fake-gpus '4*80GiB': '4*80GiB' is not COUNTxSIZE; write "), err
    assert err.count("'4*80GiB':") == 1 and "DANLU_FAKE_GPUS" not in err, err
    assert not home.exists()


@pytest.fixture
def taken_port() -> Any:
    """A port this test listens on (taken for ``danlu up``)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        yield taken.getsockname()[1]


def test_up_on_a_taken_port_leaves_no_new_home(tmp_path: Path, taken_port: int) -> None:
    home = tmp_path / "new" / "home"
    args = ["up", "--home", str(home), "--port", str(taken_port), "--fake-gpus", "1x80GiB"]
    result = CliRunner().invoke(SERVER_APP, args)
    assert result.exit_code == 2, result.output
    err = " ".join(result.stderr.split())
    assert err.startswith(f"error: cannot listen on --host 127.0.0.1 --port {taken_port}: "), err
    assert not home.exists(), sorted(p.name for p in home.iterdir())


def test_up_on_a_taken_port_leaves_an_existing_home_as_it_was(
    tmp_path: Path, taken_port: int
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    args = ["up", "--home", str(home), "--port", str(taken_port), "--fake-gpus", "1x80GiB"]
    result = CliRunner().invoke(SERVER_APP, args)
    assert result.exit_code == 2, result.output
    assert "cannot listen on" in result.stderr
    assert (home / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("command", ["up", "server"])
def test_ctrl_c_says_the_jobs_keep_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """uvicorn stops on Ctrl-C, then raises it again (KeyboardInterrupt): one line says so,
    exit 130; the jobs are adopted by the next start (docs/deploy.md)."""
    from types import SimpleNamespace

    import danlu.server.main as server_main

    home = tmp_path / "home"
    settings = SimpleNamespace(
        home=home, policy="priority", policy_knobs={}, admin_token_path=home / "admin.token"
    )
    prepared = SimpleNamespace(url="http://127.0.0.1:1", admin_token="t", settings=settings)

    def run(ready_prepared: Any, ready: Any) -> None:
        ready(ready_prepared)
        raise KeyboardInterrupt

    monkeypatch.setattr(server_main, "prepare", lambda *a, **k: prepared)
    monkeypatch.setattr(server_main, "run", run)
    result = CliRunner().invoke(SERVER_APP, [command, "--home", str(home)])
    assert result.exit_code == 130, result.output
    last = result.stdout.splitlines()[-1]
    assert last == (
        f"danlu stopped; its running jobs keep running, and the next danlu {command} --home "
        f"{home} adopts them"
    )
