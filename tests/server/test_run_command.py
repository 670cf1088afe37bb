"""``danlu run`` against a real server: the command runs as a job in the directory given,
with the environment asked for, its output streamed back and its exit code returned;
Ctrl-C cancels the job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import live_server, wait_for, wait_state
from typer.testing import CliRunner

from danlu.cli import run as run_cli
from danlu.cli.main import app
from danlu.client import Client

REPORT = "import os, sys; print('cwd', os.getcwd(), 'seed', os.environ.get('SEED')); sys.exit(3)"


def test_a_command_runs_attached_and_gives_its_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("SEED", "42")
    with live_server(tmp_path) as live, live.client() as c:
        flags = ["--url", live.url, "--token", live.token]
        args = ["run", *flags, "--workdir", str(work), "--env", "SEED", "--"]
        result = CliRunner().invoke(app, [*args, sys.executable, "-c", REPORT])
        assert result.exit_code == 3, result.output
        assert f"cwd {work} seed 42" in result.stdout
        (job,) = c.get("/jobs", params={"state": "FAILED"}).json()
        assert job["name"] == Path(sys.executable).name and job["exit_code"] == 3
        assert job["spec"]["workdir"] == str(work) and job["spec"]["env"] == {"SEED": "42"}
        assert job["restarts"] == 0  # not restarted: its exit code came back at once
        monkeypatch.chdir(work)  # the default: where danlu run was run
        ok = [sys.executable, "-c", "import os; print('in', os.getcwd())"]
        result = CliRunner().invoke(app, ["run", *flags, "--name", "ok", "--", *ok])
        assert result.exit_code == 0 and f"in {work}" in result.stdout
        result = CliRunner().invoke(app, ["run", *flags, "--gpus", "9", "--", "true"])
        assert result.exit_code == 2 and "gpus" in result.output  # refused at submission
        result = CliRunner().invoke(app, ["run", *flags, "--env", "NOT_SET_HERE_X", "--", "true"])
        assert result.exit_code == 2 and "--env 'NOT_SET_HERE_X'" in result.output


def test_ctrl_c_cancels_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def interrupted(client: Client, job_id: str) -> int:
        seen.append(job_id)
        wait_for(lambda: client.get_job(job_id)["state"] == "RUNNING")
        raise KeyboardInterrupt

    monkeypatch.setattr(run_cli, "attach", interrupted)
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        flags = ["--url", live.url, "--token", live.token]
        sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
        result = CliRunner().invoke(app, ["run", *flags, "--", *sleeper])
        assert result.exit_code == 130
        (job_id,) = seen
        assert f"job {job_id} cancelled" in result.output
        assert wait_state(c, job_id, "CANCELLED")["state"] == "CANCELLED"
