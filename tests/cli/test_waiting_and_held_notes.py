"""What ``danlu ls``, ``show`` and ``top`` write after the state of a job waiting for a
dependency or held, as the dashboard's Jobs table does (``jobs.js``'s ``stateNote``):
``PENDING (waiting)`` for a job whose ``waiting_on`` is set (``ls`` said plain ``PENDING``,
the dashboard ``PENDING (waiting)``), and neither note where the why beside the state says it
already: a held job read ``PENDING (held)`` beside ``held by alice``, a waiting one on the
dashboard ``PENDING (waiting)`` beside ``waiting for job ... to succeed``. Where the why says
something else (its owner disabled), the note is what tells."""

from __future__ import annotations

from typing import Any

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands
from rich.console import Console

from danlu.cli import top
from danlu.cli.job_table import STACKED_STATE, jobs_table

DEPENDENCY = "0a1b2c3d4e60"
NAMED = f"waiting for job {DEPENDENCY} (prep) to succeed"
"""The server's reason of a job waiting for :data:`DEPENDENCY`."""
DISABLED = "owner alice is disabled: not started until an admin enables them"
"""A reason of a queued job that says neither that it is held nor what it waits for."""


def _job(**extra: Any) -> dict[str, Any]:
    job = {"id": "0a1b2c3d4e5f", "name": "eval", "user": "alice", "state": "PENDING"}
    return job | {"gpus": 1, "allocation": [], "submitted_at": 100.0} | extra


def _state_cells(job: dict[str, Any]) -> tuple[str, str]:
    """``job``'s state cell, on one line and stacked (a narrow table's)."""
    (cells,) = jobs_table([job], now=200.0).rows
    return cells["state"].plain, cells[STACKED_STATE].plain


@pytest.mark.parametrize("reason", [None, DISABLED, "waiting for job 0a1b2c3d4e61 (x) to fail"])
def test_a_job_waiting_for_a_dependency_its_why_does_not_name_says_waiting(
    reason: str | None,
) -> None:
    job = _job(waiting_on=DEPENDENCY, pending_reason=reason)
    assert _state_cells(job) == ("PENDING (waiting)", "PENDING\nwaiting")


def test_a_note_the_why_says_is_not_said_again() -> None:
    assert _state_cells(_job(waiting_on=DEPENDENCY, pending_reason=NAMED))[0] == "PENDING"
    for held in ("held by alice", "held"):
        assert _state_cells(_job(held_at=150.0, pending_reason=held))[0] == "PENDING"
        # held wins over waiting: its why says it is held, and what it waits for comes once
        # it is released (danlu release: its why names the dependency then)
        both = _job(held_at=150.0, waiting_on=DEPENDENCY, pending_reason=held)
        assert _state_cells(both)[0] == "PENDING"
    # a why that says something else: the note says it
    assert _state_cells(_job(held_at=150.0, pending_reason=DISABLED))[0] == "PENDING (held)"
    both = _job(held_at=150.0, waiting_on=DEPENDENCY, pending_reason=DISABLED)
    assert _state_cells(both)[0] == "PENDING (held)"
    # a running job's why is its GPUs: held is said, as before
    share = {"node": "n1", "gpu": 0, "milli": 1000, "memory": 1}
    running = _job(state="RUNNING", held_at=150.0, pending_reason="held by alice")
    assert _state_cells(running | {"allocation": [share]})[0] == "RUNNING (held)"


def test_an_ended_job_keeps_its_waiting_on_and_says_nothing() -> None:
    for state in ("SUCCEEDED", "FAILED", "CANCELLED"):
        assert _state_cells(_job(state=state, waiting_on=DEPENDENCY))[0] == state


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def test_ls_show_and_top_say_it_once(fake: FakeApi) -> None:
    waiting = fake.add_job("eval", waiting_on=DEPENDENCY, pending_reason=DISABLED)
    held = fake.add_job("train", held_at=1500.0, pending_reason="held by alice")
    code, out, err = invoke(jobs_app(), "ls")
    assert code == 0, err
    rows = {
        job["id"]: line for line in out.splitlines() for job in (waiting, held) if job["id"] in line
    }
    assert "PENDING (waiting)" in rows[waiting["id"]], out
    assert "PENDING (held)" not in rows[held["id"]] and rows[held["id"]].count("held") == 1, out
    code, out, err = invoke(jobs_app(), "show", str(waiting["id"]))
    assert code == 0, err
    assert any(line.split() == ["state", "PENDING", "(waiting)"] for line in out.splitlines()), out
    code, out, err = invoke(jobs_app(), "show", str(held["id"]))
    assert code == 0, err
    assert any(line.split() == ["state", "PENDING"] for line in out.splitlines()), out
    assert any(line.split() == ["pending", "held", "by", "alice"] for line in out.splitlines())
    frame = Console(width=200, record=True)
    frame.print(top.render([], [fake.jobs[waiting["id"]]], now=2000.0))
    assert "PENDING (waiting)" in frame.export_text()
