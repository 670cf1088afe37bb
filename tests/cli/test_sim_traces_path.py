"""``danlu sim run / compare / plan --traces PATH`` with a PATH that is no folder ran a
workload without Pollux measurements (the built-in synthetic one) and exited 0, as if the
path had been read. It is an error naming the flag and the path (exit 2), before anything
is simulated."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app

COMMANDS = [["run", "--quiet"], ["compare", "--quiet"], ["plan", "--target", "avg_jct<=2h"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_traces_path_that_does_not_exist_is_refused(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "no-such-traces"
    result = CliRunner().invoke(app, ["sim", *command, "--traces", str(missing)])
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert f"--traces {missing} does not exist" in said
    assert "Pollux" in said


def test_a_traces_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "traces.csv"
    file.write_text("x\n")
    result = CliRunner().invoke(app, ["sim", "run", "--quiet", "--traces", str(file)])
    assert result.exit_code == 2, result.output
    assert f"--traces {file} is not a folder" in " ".join(result.stderr.split())


def test_the_default_traces_are_not_needed_by_a_synthetic_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where the default, ../shared/data/pollux/traces, is not
    result = CliRunner().invoke(app, ["sim", "run", "--quiet", "--jobs", "5"])
    assert result.exit_code == 0, result.output
