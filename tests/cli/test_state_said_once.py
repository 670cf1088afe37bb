"""A line that prints a job's (or sweep's) state and then its reason says the state once.
The server's ``why`` of an ended job begins with the state's word (``failed: out of memory
...``), and a cancelled job's or sweep's reason is ``cancelled by alice``: ``danlu why``
printed ``ID FAILED: failed: out of memory ...``, ``danlu run`` ``danlu: job X FAILED:
failed: ...``, ``danlu wait`` ``CANCELLED: cancelled by alice``. Against the in-memory API
of ``cli_fake_api``."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from cli_fake_api import TOKEN, FakeApi, invoke, jobs_app, serve_jobs_commands
from rich.console import Console

from danlu.cli import jobs as jobs_cli
from danlu.cli import run as run_cli
from danlu.cli import waiting
from danlu.cli.markup import after_state
from danlu.client import Client

APP = jobs_app()

OOM = "out of memory (exit code 1); out of restarts (0 of 0)"
"""A run out of GPU memory with no restarts left, as the job's last event says it."""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


@pytest.mark.parametrize(
    ("state", "why", "said"),
    [
        # the server's words (danlu.server.services.job_reasons.why) for each state
        ("FAILED", f"failed: {OOM}", f"FAILED: {OOM}"),
        ("FAILED", "failed (exit code 3); out of restarts (0 of 0)", "FAILED (exit code 3); "),
        ("SUCCEEDED", "succeeded: exited 0", "SUCCEEDED: exited 0"),
        ("CANCELLED", "cancelled by alice", "CANCELLED by alice"),
        ("CANCELLED", "cancelled: time limit reached: ran 2h of 2h", "CANCELLED: time limit"),
        ("RUNNING", "running on node-0:0", "RUNNING on node-0:0"),
        ("RESTARTING", "restarting after a failure (restart 1)", "RESTARTING after a failure"),
        ("PENDING", "waiting for 1 GPU(s)", "PENDING: waiting for 1 GPU(s)"),
        ("PREEMPTING", "checkpointing before re-queue", "PREEMPTING: checkpointing before"),
    ],
)
def test_why_says_the_state_once(fake: FakeApi, state: str, why: str, said: str) -> None:
    job = fake.add_job("train", state)
    fake.whys[job["id"]] = why
    code, out, _ = invoke(APP, "why", job["id"])
    assert code == 0
    assert out.startswith(f"{job['id']} {said}"), out
    assert out.lower().count(state.lower()) == 1, out


def test_why_json_keeps_the_servers_reason(fake: FakeApi) -> None:
    job = fake.add_job("train", "FAILED")
    fake.whys[job["id"]] = f"failed: {OOM}"
    _, out, _ = invoke(APP, "why", job["id"], "--json")
    assert f'"reason": "failed: {OOM}"' in out


def test_run_says_the_state_once(fake: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    """``danlu run``'s last line after its job failed."""
    job = fake.add_job("t", "FAILED", exit_code=1)["id"]
    fake.whys[job] = f"failed: {OOM}"
    said = io.StringIO()
    monkeypatch.setattr(run_cli, "err", Console(file=said, width=400))
    with Client("http://fake", TOKEN, transport=fake.transport()) as client:
        assert run_cli.attach(client, job) == 1
    assert said.getvalue() == f"danlu: job {job} FAILED: {OOM}\n"


def test_wait_says_a_cancelled_job_once(fake: FakeApi) -> None:
    job = fake.add_job("train", started_at=1500.0)
    fake.end_job(job["id"], "CANCELLED", "cancelled by alice")
    code, out, _ = invoke(APP, "wait", job["id"], "--poll", "0.1")
    assert code == waiting.NOT_SUCCEEDED
    assert out.splitlines() == [f"job {job['id']} (train): CANCELLED by alice"]


def test_wait_says_a_cancelled_array_once(fake: FakeApi) -> None:
    """The line on stderr for a sweep or array that did not succeed as a whole."""
    line = waiting.sweep_failed(
        {"id": "a1", "state": "CANCELLED", "reason": "cancelled by admin", "array": True}
        | {"submitted": 1, "total": 3}
    )
    assert line == "array a1 CANCELLED by admin (1 of 3 submitted)"


def _sweep_app(monkeypatch: pytest.MonkeyPatch, sweep: dict[str, Any]) -> typer.Typer:
    """The job and sweep commands, their client answered ``sweep`` for every request."""
    from danlu.cli import sweep as sweep_cli

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        answer = httpx.MockTransport(lambda request: httpx.Response(200, json=sweep))
        return Client("http://fake", TOKEN, transport=answer)

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    monkeypatch.setattr(jobs_cli, "console", Console(width=300))
    app = jobs_app()
    sweep_cli.register(app)
    return app


def test_sweep_cancel_says_the_state_once(monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = {
        "id": "5a7e0c9d1b2f",
        "name": "lr",
        "user": "admin",
        "array": False,
        "state": "CANCELLED",
        "reason": "cancelled by admin",
        "metric": "loss",
        "goal": "minimize",
        "total": 2,
        "submitted": 1,
        "created_at": 1000.0,
        "finished_at": 1100.0,
        "spec": {"parallel": 1},
        "notes": [],
        "trials": [],
        "best": None,
    }
    code, out, err = invoke(_sweep_app(monkeypatch, sweep), "sweep", "cancel", sweep["id"])
    assert code == 0, err
    assert out.splitlines()[0] == (
        "sweep 5a7e0c9d1b2f (lr): CANCELLED by admin; 1 of 2 trials submitted"
    )


@pytest.mark.parametrize(
    ("state", "reason", "after"),
    [
        ("FAILED", "failed: oom", ": oom"),
        ("FAILED", "Failed: oom", ": oom"),
        ("FAILED", "failed:", ""),
        ("FAILED", "failed", ""),
        ("CANCELLED", "cancelled by alice", " by alice"),
        ("FAILED", "failedover to node-1", ": failedover to node-1"),
        ("FAILED", "out of memory", ": out of memory"),
        ("FAILED", "", ""),
        ("FAILED", None, ""),
        ("DONE", "2 trials ended", ": 2 trials ended"),
        (None, "none of its GPUs", ": none of its GPUs"),
    ],
)
def test_after_state(state: str | None, reason: str | None, after: str) -> None:
    assert after_state(state, reason) == after


def _event(old: str | None, new: str, reason: str) -> dict[str, Any]:
    """A state-change event as ``GET /events`` lists it."""
    return {
        "id": 7,
        "job_id": "0123456789ab",
        "job_name": "train",
        "user": "alice",
        "project": "default",
        "time": 1000.0,
        "old": old,
        "new": new,
        "reason": reason,
    }


@pytest.mark.parametrize(
    ("old", "new", "reason", "said"),
    [
        ("RUNNING", "CANCELLED", "cancelled by alice", "RUNNING -> CANCELLED by alice"),
        ("PENDING", "RUNNING", "running on n1:0", "PENDING -> RUNNING on n1:0"),
        ("RUNNING", "FAILED", "failed: out of memory", "RUNNING -> FAILED: out of memory"),
        (
            "RUNNING",
            "FAILED",
            "out of memory (exit 1)",
            "RUNNING -> FAILED: out of memory (exit 1)",
        ),
        ("RUNNING", "SUCCEEDED", "", "RUNNING -> SUCCEEDED"),
        (None, "PENDING", "pending: waiting for 1 GPU(s)", "submitted (PENDING): pending: waiting"),
    ],
)
def test_an_event_line_says_the_state_once(
    old: str | None, new: str, reason: str, said: str
) -> None:
    """``danlu events -f``'s line: it read ``RUNNING -> CANCELLED: cancelled by alice``."""
    from danlu.cli import events as events_cli

    line = events_cli.line(_event(old, new, reason))
    assert line.endswith(said) if not said.startswith("submitted") else said in line, line


def test_the_events_table_says_the_state_once() -> None:
    """``danlu events``'s table: its reason beside the change into CANCELLED read
    ``cancelled by alice``."""
    from danlu.cli import events as events_cli

    events = [
        _event("RUNNING", "CANCELLED", "cancelled by alice"),
        _event("PENDING", "RUNNING", "running on n1:0"),
        _event("RUNNING", "FAILED", "out of memory (exit code 1)"),
    ]
    printed = io.StringIO()
    Console(file=printed, width=300).print(events_cli.table(events))
    rows = [r for r in printed.getvalue().splitlines() if "0123456789ab" in r]
    assert len(rows) == 3
    cells = [[c.strip() for c in r.split("│")[5:7]] for r in rows]
    assert cells == [
        ["RUNNING -> CANCELLED", "by alice"],
        ["PENDING -> RUNNING", "on n1:0"],
        ["RUNNING -> FAILED", "out of memory (exit code 1)"],
    ]


def test_show_s_events_say_the_state_once(fake: FakeApi) -> None:
    """``danlu show``'s events table: ``CANCELLED`` beside ``by alice``, not beside
    ``cancelled by alice``."""
    job = fake.add_job("train", started_at=1500.0)
    fake.end_job(job["id"], "CANCELLED", "cancelled by alice")
    code, out, _ = invoke(APP, "show", job["id"])
    assert code == 0
    row = [r for r in out.splitlines() if "CANCELLED" in r and "alice" in r]
    assert len(row) == 1, out
    assert "cancelled by" not in row[0].lower() and "by alice" in row[0], row[0]
    assert row[0].count("CANCELLED") == 1
