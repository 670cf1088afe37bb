"""``danlu sim run`` printed a workload's project and job names (read from a trace CSV, often
downloaded) with Rich markup escaped but control characters raw: a project named with an
ESC sequence cleared or recoloured the terminal, a line break split the "by project" table
into a spoofed row. They are written as escapes (``\\x1b``, ``\\n``) now."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import sim as sim_cli
from danlu.cli.main import app

EVIL_PROJECT = "be\x1b[2Jta\nX"
EVIL_JOB = "c\x1b]0;pwned\x07\u202e"


def _workload(tmp_path: Path) -> Path:
    """Two projects (so the "by project" table is shown) and a job too big for the
    cluster (so a rejection is noted), their names with control characters."""
    path = tmp_path / "evil.csv"
    with path.open("w", newline="") as out:
        out.write("name,submit_time,duration,gpus,project\r\n")
        out.write("a,0,100,1,alpha\r\n")
        out.write(f'b,10,100,1,"{EVIL_PROJECT}"\r\n')
        out.write(f'"{EVIL_JOB}",20,100,9999,alpha\r\n')
    return path


def test_sim_run_shows_a_traces_control_names_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim_cli, "console", Console(width=200))
    result = CliRunner().invoke(
        app, ["sim", "run", "--workload", str(_workload(tmp_path)), "--nodes", "1"]
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    for char in ("\x1b", "\x07", "\u202e"):
        assert char not in out, (char, out)
    assert "be\\x1b[2Jta\\nX" in out  # the project, shown (not lost, not markup)
    assert "c\\x1b]0;pwned\\x07\\u202e: asks for 9999 GPUs" in out  # the rejected job
    rows = [line for line in out.splitlines() if line.startswith("│ ")]
    assert not any(line.startswith("│ X ") for line in rows), out  # no spoofed row
