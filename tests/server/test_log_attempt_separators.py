"""``danlu logs`` tells a job's attempts apart: its log holds every run's output one after
another, and after a restart nothing showed where the second attempt began. ``GET
/jobs/{id}/logs/runs`` says at which byte each run began (the executor keeps that in the
launch record of the job's last run, carried over from run to run), and ``danlu logs``
puts a line there on a terminal (``--separators``); into a pipe or a file, and with
``--no-separators``, the bytes stay as they are. A live server with the local executor."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import live_server, spec, submit, wait_state
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.executors import records
from danlu.server.services import jobs

FIRST = b"first attempt: no newline at its end"
SECOND = b"second attempt\n"
THIRD = b"third attempt\n"
SEPARATOR = re.compile(rb"\xe2\x94\x80\xe2\x94\x80 attempt (\d+) \(started [0-9-]+ [0-9:]+\) ")


def _fails_twice(marker: Path) -> str:
    """A job that prints :data:`FIRST` and exits 3, then :data:`SECOND` and exits 3, then
    :data:`THIRD` and succeeds (``marker`` counts its runs)."""
    return (
        "import pathlib, sys\n"
        f"p = pathlib.Path({str(marker)!r})\n"
        "n = int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n + 1))\n"
        f"out = [{FIRST!r}, {SECOND!r}, {THIRD!r}][n]\n"
        "sys.stdout.buffer.write(out); sys.stdout.flush()\n"
        "raise SystemExit(3 if n < 2 else 0)\n"
    )


def test_the_runs_of_a_restarted_job_are_told_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "RESTART_BACKOFF_SECONDS", 0.05)
    marker = tmp_path / "runs"
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        job = submit(c, spec("thrice", _fails_twice(marker), max_restarts=2))
        done = wait_state(c, job["id"], {"FAILED", "SUCCEEDED", "CANCELLED"})
        assert (done["state"], done["restarts"]) == ("SUCCEEDED", 2)
        log = (live.home / "logs" / f"{job['id']}.log").read_bytes()
        assert log == FIRST + SECOND + THIRD  # the log itself is the job's bytes alone

        runs = c.get(f"/jobs/{job['id']}/logs/runs")
        assert runs.status_code == 200, runs.text
        starts = runs.json()
        assert [r["offset"] for r in starts] == [0, len(FIRST), len(FIRST + SECOND)]
        attempts = [r["attempt"] for r in starts]
        assert attempts == sorted(attempts) and len(set(attempts)) == 3
        assert all(r["started_at"] > 0 for r in starts)
        assert c.get(f"/jobs/{job['id'][:6]}/logs/runs").json() == starts  # a prefix

        flags = ["--url", live.url, "--token", live.token]
        for follow in ([], ["-f"]):
            result = CliRunner().invoke(app, ["logs", *follow, "--separators", job["id"], *flags])
            assert result.exit_code == 0, result.output
            out = result.stdout_bytes
            lines = out.split(b"\n")
            # the first attempt's unfinished line ends before the separator's line
            assert lines[0] == FIRST, out
            marked = [SEPARATOR.match(line) for line in lines]
            assert [int(m.group(1)) for m in marked if m] == attempts[1:], out
            assert lines[2] == SECOND.rstrip(b"\n") and lines[4] == THIRD.rstrip(b"\n"), out

        for args in (["logs", job["id"]], ["logs", "--no-separators", job["id"]]):
            result = CliRunner().invoke(app, [*args, *flags])  # not a terminal: as they are
            assert result.exit_code == 0, result.output
            assert result.stdout_bytes == log


def test_a_job_that_ran_once_has_one_run_and_no_separator(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        job = submit(c, spec("once", "print('only')"))
        wait_state(c, job["id"], "SUCCEEDED")
        starts = c.get(f"/jobs/{job['id']}/logs/runs").json()
        assert [(r["offset"], r["attempt"]) for r in starts] == [(0, 1)]
        flags = ["--url", live.url, "--token", live.token]
        result = CliRunner().invoke(app, ["logs", "--separators", job["id"], *flags])
        assert result.exit_code == 0, result.output
        assert result.stdout_bytes == b"only\n"


def test_a_launch_record_keeps_at_most_so_many_earlier_runs(tmp_path: Path) -> None:
    """The carried list is bounded (the record is read at every poll): one over the bound
    reads as no list at all, never as a damaged record."""
    kept = [[n, n, 1.0] for n in range(records.LOG_RUNS_KEPT)]
    record = {"job_id": "j", "attempt": 1, "log_path": "x", "launched_at": 1.0}
    run_dir = tmp_path / "j"
    run_dir.mkdir()
    for runs, read in ((kept, kept), ([*kept, [9, 9, 1.0]], None), ([[1, -1, 1.0]], None)):
        (run_dir / "launch.json").write_text(json.dumps(record | {"log_runs": runs}))
        launch = records.read_launch(run_dir)
        assert launch is not None and launch.get("log_runs") == read


def test_runs_of_a_job_never_run_are_none_and_another_user_s_are_refused(
    tmp_path: Path,
) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live, live.client() as c:
        job = submit(c, spec("waits", "print(1)"))
        assert c.get(f"/jobs/{job['id']}/logs/runs").json() == []
        assert c.post("/users", json={"name": "bob"}).status_code == 201
        token = c.post("/users/bob/tokens", json={}).json()["token"]
        with live.client(token) as bob:
            answer = bob.get(f"/jobs/{job['id']}/logs/runs")
            assert answer.status_code in (403, 404), answer.text


def test_a_follow_marks_a_run_that_starts_while_it_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``danlu logs -f`` opened during the first run: the restart's run starts after a pause
    (the first run exited, the control plane launched it again), so the follow asks again
    where the runs begin before it writes the new run's first bytes."""
    monkeypatch.setattr(jobs, "RESTART_BACKOFF_SECONDS", 0.05)
    marker = tmp_path / "runs"
    code = (
        "import pathlib, sys, time\n"
        f"p = pathlib.Path({str(marker)!r})\n"
        "n = int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n + 1))\n"
        "print(f'run {n}', flush=True)\n"
        "time.sleep(1.0 if n == 0 else 0)\n"
        "raise SystemExit(3 if n == 0 else 0)\n"
    )
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        job = submit(c, spec("twice", code, max_restarts=1))
        wait_state(c, job["id"], "RUNNING")
        flags = ["--url", live.url, "--token", live.token]
        result = CliRunner().invoke(app, ["logs", "-f", "--separators", job["id"], *flags])
        assert result.exit_code == 0, result.output
        lines = result.stdout_bytes.split(b"\n")
        assert lines[0] == b"run 0" and lines[2] == b"run 1", result.stdout_bytes
        assert SEPARATOR.match(lines[1]), result.stdout_bytes
        assert c.get(f"/jobs/{job['id']}").json()["restarts"] == 1
