"""``danlu sim compare`` with more policies than fit an 80-column terminal (or a pipe):
the numbers were cut short ("3,194…"), and the policy names too. Every number is shown
whole (the table may run wider than the terminal, which wraps it) and no column is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import sim as sim_cli
from danlu.cli.main import app
from danlu.cli.sim_tables import format_value

POLICIES = ["fifo", "sjf", "priority", "tiresias", "value-density", "fair-share", "danlu"]


def test_compare_keeps_every_number_whole_at_80_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recording = Console(width=80, record=True)
    monkeypatch.setattr(sim_cli, "console", recording)
    out = tmp_path / "out.json"
    args = ["sim", "compare", "--quiet", "--jobs", "30", "--policies", ",".join(POLICIES)]
    result = CliRunner().invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    text = recording.export_text()
    assert "…" not in text, text
    by_policy = json.loads(out.read_text())
    row = next(line for line in text.splitlines() if line.startswith("│ average"))
    cells = [cell.strip() for cell in row.strip("│").split("│")][1:]
    wanted = [format_value(by_policy[p]["avg_jct"], "seconds") for p in POLICIES]
    assert cells == wanted, (cells, wanted)
