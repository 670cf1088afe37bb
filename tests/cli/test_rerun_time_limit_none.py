"""``danlu rerun JOB --time-limit none`` removes the finished job's time limit (the server
reads ``none``, or Slurm's ``UNLIMITED``, as ``danlu update`` does), and the flag's help
says so: it said only ``3600, 90m, 04:00:00``, as ``danlu submit``'s, whose spec file
refuses the word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_fake_api import invoke
from cli_real_api import real_api
from typer.testing import CliRunner

from danlu.cli.main import app


def _option_help(command: str, flag: str) -> str:
    """The help line of ``flag`` in ``danlu COMMAND --help``, without its box."""
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.strip("│ ").split()) for line in result.stdout.splitlines()]
    return next(line for line in lines if line.startswith(f"{flag} "))


@pytest.mark.parametrize(
    ("command", "flag"),
    [("rerun", "--time-limit"), ("update", "--time-limit"), ("update", "--deadline")],
)
def test_the_help_says_none_removes_the_limit(command: str, flag: str) -> None:
    assert "none" in _option_help(command, flag).split(";")[-1]


def test_submit_s_time_limit_help_offers_no_none() -> None:
    assert "none" not in _option_help("submit", "--time-limit")  # a spec refuses the word


def test_rerun_time_limit_none_removes_the_finished_jobs_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: train\ncommand: [python, train.py]\ntime_limit: 1h\ndeadline: 1d\n")
    with real_api(tmp_path, monkeypatch):  # no loops: the job stays PENDING until cancelled
        code, out, err = invoke(app, "submit", str(spec), "--json")
        assert code == 0, out + err
        submitted = json.loads(out)
        assert submitted["time_limit"] == 3600 and submitted["deadline_at"] is not None
        first = submitted["id"]
        assert invoke(app, "cancel", first)[0] == 0
        flags = ["--time-limit", "none", "--set", "deadline=UNLIMITED"]
        code, out, err = invoke(app, "rerun", first, *flags, "--json")
        assert code == 0, out + err
        again = json.loads(out)
        code, out, err = invoke(app, "rerun", first, "--time-limit", "nevr")
    assert (again["time_limit"], again["deadline_at"]) == (None, None)
    assert (again["spec"]["time_limit"], again["spec"]["deadline"]) == (None, None)
    assert code == 2 and err.startswith("error: --time-limit: ") and "write none" in err, err
