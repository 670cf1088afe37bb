"""A held job not ended reads ``RUNNING (held)`` (``PENDING (held)``, ...) in ``danlu ls``,
``show`` and ``top``, as on the dashboard's Jobs table: ``danlu ls`` said plain ``RUNNING`` of
a running job held (``danlu hold``: preempted by checkpoint in the next round) and plain
``PENDING`` of one waiting to be released, while the dashboard said ``(held)``. ``(not
launched)`` wins over it in both; an ended job keeps its ``held_at`` and gets no note."""

from __future__ import annotations

from typing import Any

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands
from rich.console import Console

from danlu.cli.job_table import STACKED_STATE, jobs_table

SHARE = {"node": "node-0", "gpu": 0, "milli": 1000, "memory": 80 * 1024**3}


def _job(state: str, **extra: Any) -> dict[str, Any]:
    job = {
        "id": "0a1b2c3d4e5f",
        "name": "train-resnet",
        "user": "alice",
        "state": state,
        "gpus": 1,
        "allocation": [SHARE] if state in ("RUNNING", "PREEMPTING") else [],
        "submitted_at": 100.0,
    }
    return job | extra


def _state_cells(job: dict[str, Any]) -> tuple[str, str]:
    """The state cell of ``job``'s row: on one line, and stacked (a narrow table's)."""
    (cells,) = jobs_table([job], now=200.0).rows
    return cells["state"].plain, cells[STACKED_STATE].plain


@pytest.mark.parametrize("state", ["PENDING", "RUNNING", "PREEMPTING", "RESTARTING"])
def test_a_held_unfinished_job_says_held(state: str) -> None:
    assert _state_cells(_job(state, held_at=150.0)) == (f"{state} (held)", f"{state}\nheld")
    assert _state_cells(_job(state, held_at=150.0, launched=True))[0] == f"{state} (held)"
    assert _state_cells(_job(state)) == (state, state)  # not held
    assert _state_cells(_job(state, held_at=None)) == (state, state)


def test_not_launched_wins_and_an_ended_job_says_nothing() -> None:
    placed = _job("RUNNING", held_at=150.0, launched=False)
    assert _state_cells(placed) == ("RUNNING (not launched)", "RUNNING\nnot launched")
    for state in ("SUCCEEDED", "FAILED", "CANCELLED"):
        assert _state_cells(_job(state, held_at=150.0, exit_code=0)) == (state, state)


def _terminal(width: int) -> Console:
    return Console(width=width, force_terminal=True, color_system=None, record=True)


def test_a_narrow_table_puts_held_under_the_state() -> None:
    job = _job("RUNNING", held_at=150.0, gpu_memory=80 * 1024**3)
    other = _job("PREEMPTING", id="0a1b2c3d4e60", name="eval", gpu_memory=80 * 1024**3)
    narrow = _terminal(80)
    narrow.print(jobs_table([job, other], now=200.0))
    lines = narrow.export_text().splitlines()
    header = [cell.strip() for cell in lines[1].split("┃")[1:-1]]
    assert header == ["id", "name", "state", "gpus", "age", "where / why"]  # a table
    (at,) = [i for i, line in enumerate(lines) if "0a1b2c3d4e5f" in line]
    assert [lines[at + i].split("│")[3].strip() for i in (0, 1)] == ["RUNNING", "held"]
    wide = _terminal(160)
    wide.print(jobs_table([job, other], now=200.0))
    (row,) = [line for line in wide.export_text().splitlines() if "0a1b2c3d4e5f" in line]
    assert row.split("│")[4].strip() == "RUNNING (held)"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def test_ls_and_show_say_it(fake: FakeApi) -> None:
    held = fake.add_job("held", "RUNNING", launched=True, allocation=[SHARE], held_at=1500.0)
    code, out, err = invoke(jobs_app(), "ls")
    assert code == 0, err
    (row,) = [line for line in out.splitlines() if held["id"] in line]
    assert "RUNNING (held)" in row, out
    code, out, err = invoke(jobs_app(), "show", str(held["id"]))
    assert code == 0, err
    assert any(line.split() == ["state", "RUNNING", "(held)"] for line in out.splitlines()), out
