"""``danlu sim plan``'s table on an 80-column terminal: its numbers were cut short
("35,562…") and a missed target's name too ("p99_qu…"). Every number is shown whole and a
long name is folded, not cut. Into a pipe (80 columns to Rich) the table is as wide as its
cells, a trial a line."""

from __future__ import annotations

import pytest
from rich.console import Console
from typer.testing import CliRunner

import danlu.sim.plan as sim_plan
from danlu.cli import sim as sim_cli
from danlu.cli.main import app
from danlu.sim.plan import Plan, Trial

SUMMARY = {
    "avg_jct": 7245.5,
    "p99_jct": 90746.9,
    "avg_queueing_delay": 3774.1,
    "p99_queueing_delay": 16878.2,
    "gpu_utilization": 0.911,
}


def _plan(monkeypatch: pytest.MonkeyPatch, recording: Console) -> str:
    """``danlu sim plan``'s output on ``recording``, its one trial missing two targets."""
    monkeypatch.setattr(sim_cli, "console", recording)
    missed = Trial(nodes=8, summary=SUMMARY, missed=("avg_jct", "p99_queueing_delay"))
    # the search itself is danlu.sim.plan's; the table of what it tried is this command's
    monkeypatch.setattr(sim_plan, "plan_capacity", lambda *_: Plan(None, (missed,)))
    command = ["sim", "plan", "--jobs", "5", "--max-nodes", "8"]
    targets = ["--target", "avg_jct<=2h", "--target", "p99_queueing_delay<=1h"]
    result = CliRunner().invoke(app, [*command, *targets])
    assert result.exit_code == 1, result.output  # no size met the targets
    return recording.export_text()


def test_plan_table_keeps_numbers_whole_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _plan(monkeypatch, Console(width=80, record=True, force_terminal=True))
    assert "…" not in text, text
    for shown in ("7,245.5", "90,746.9", "3,774.1", "16,878.2", "0.911"):
        assert shown in text, (shown, text)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    # the folded target names read whole once the column's cells are joined up
    rows = [line for line in text.splitlines() if line.startswith("│")]
    column = "".join(line.split("│")[-2].strip() for line in rows)
    assert "p99_queueing_delay" in column, column


def test_plan_table_into_a_pipe_is_a_trial_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _plan(monkeypatch, Console(width=80, record=True, force_terminal=False))
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert len(rows) == 1, text
    assert "7,245.5" in rows[0] and "missed avg_jct, p99_queueing_delay" in rows[0], text
