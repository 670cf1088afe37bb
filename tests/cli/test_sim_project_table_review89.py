"""``sim run``'s "by project" table showed only finished jobs; a project whose
jobs were all rejected was left out, one with some read as one with fewer jobs. It shows
the unfinished and rejected counts when there are any (the same columns as before when
there are none)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import sim as sim_cli
from danlu.cli.main import app


def _workload(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "w.csv"
    path.write_text("name,submit_time,duration,gpus,project\n" + "\n".join(rows) + "\n")
    return path


def _table_lines(out: str) -> list[str]:
    """The "by project" table's header line, then its rows."""
    lines = out[out.index("by project") :].splitlines()
    header = next(line for line in lines if line.startswith("┃"))
    return [header, *(line for line in lines if line.startswith("│"))]


def test_the_project_table_counts_unfinished_and_rejected_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim_cli, "console", Console(width=200))
    workload = _workload(
        tmp_path,
        ["a,0,100,1,alpha", "b,0,100,9999,beta", "c,0,100,9999,beta"],
    )
    result = CliRunner().invoke(app, ["sim", "run", "--workload", str(workload), "--nodes", "1"])
    assert result.exit_code == 0, result.output
    lines = _table_lines(result.stdout)
    header = lines[0]
    assert "unfinished" in header and "rejected" in header
    beta = next(line for line in lines if line.startswith("│ beta "))
    cells = [cell.strip() for cell in beta.strip("│").split("│")]
    assert cells[0] == "beta" and cells[1] == "0"  # none of beta's jobs finished
    assert cells[-2:] == ["0", "2"]  # b and c rejected (listed: it was left out)


def test_the_project_table_is_as_before_when_every_job_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim_cli, "console", Console(width=200))
    workload = _workload(tmp_path, ["a,0,100,1,alpha", "b,0,100,1,beta"])
    result = CliRunner().invoke(app, ["sim", "run", "--workload", str(workload)])
    assert result.exit_code == 0, result.output
    header = _table_lines(result.stdout)[0]
    assert "GPU share" in header and "unfinished" not in header and "rejected" not in header
