"""A job's log stays readable once a later launch of it fails.

The log read went through the job's current run (``Handle(job.id, job.attempt)``), and the
executor's record of the earlier run was deleted before the later launch could still fail
(its ``workdir`` gone, the node out of room): no record matched any more, and
``GET /jobs/{id}/logs`` (``tail=``, ``follow=true``, ``danlu logs``, ``danlu logs -f``)
answered 200 with no bytes and ``X-Danlu-Log-Offset: 0`` while the output was still in
``HOME/logs/JOB.log``. Each test reads the log through the real HTTP API and CLI of a live
server with the local executor.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import Live, live_server, spec, submit, wait_for, wait_state
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.cli.waiting import NOT_SUCCEEDED
from danlu.server.services import jobs

LINE = b"first run: an important message\n"


def _exits_3(workdir: Path) -> str:
    """A job that prints :data:`LINE`, deletes its own ``workdir`` and exits 3."""
    return (
        "import shutil, sys\n"
        f"sys.stdout.write({LINE.decode()!r}); sys.stdout.flush()\n"
        f"shutil.rmtree({str(workdir)!r})\n"
        "raise SystemExit(3)"
    )


def _assert_log_reads(live: Live, client: httpx.Client, job_id: str) -> None:
    """The job's log, as on disk, through a plain read, ``tail``, a follow of a finished
    job and the CLI's ``logs`` and ``logs -f`` (the latter two only once it finished)."""
    on_disk = (live.home / "logs" / f"{job_id}.log").read_bytes()
    assert on_disk == LINE
    url = f"/jobs/{job_id}/logs"
    plain = client.get(url)
    assert plain.status_code == 200, plain.text
    assert plain.content == LINE
    assert plain.headers["X-Danlu-Log-Offset"] == str(len(LINE))
    assert client.get(url, params={"offset": 6}).content == LINE[6:]
    tail = client.get(url, params={"tail": 8})
    assert (tail.content, tail.headers["X-Danlu-Log-Offset"]) == (LINE[-8:], str(len(LINE)))


def _assert_finished_log_reads(live: Live, client: httpx.Client, job_id: str) -> None:
    """:func:`_assert_log_reads`, and the follows that end with the finished job."""
    _assert_log_reads(live, client, job_id)
    url = f"/jobs/{job_id}/logs"
    assert client.get(url, params={"follow": "true"}).content == LINE
    assert client.get(url, params={"follow": "true", "tail": 8}).content == LINE[-8:]
    flags = ["--url", live.url, "--token", live.token]
    # a plain read succeeds; a follow ends as `danlu wait` does for a job that did not
    # succeed (every job here ends FAILED or CANCELLED)
    for args, code in ((["logs", job_id], 0), (["logs", "-f", job_id], NOT_SUCCEEDED)):
        result = CliRunner().invoke(app, [*args, *flags])
        assert result.exit_code == code, (args, result.output)
        assert result.stdout_bytes == LINE, args


def _events(client: httpx.Client, job_id: str) -> list[str]:
    return [e["reason"] for e in client.get(f"/jobs/{job_id}/events").json()]


def test_the_log_reads_after_the_restart_finds_its_workdir_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's case: the first run exits 3, the restart's launch finds no working
    directory and the job ends FAILED; the first run's line is still its log."""
    monkeypatch.setattr(jobs, "RESTART_BACKOFF_SECONDS", 0.05)
    workdir = tmp_path / "wd"
    workdir.mkdir()
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        body = spec("wdgone", _exits_3(workdir), workdir=str(workdir), max_restarts=1)
        job = submit(c, body)
        done = wait_state(c, job["id"], {"FAILED", "SUCCEEDED", "CANCELLED"})
        assert (done["state"], done["restarts"]) == ("FAILED", 1)
        assert "is not a directory" in _events(c, job["id"])[-1]
        _assert_finished_log_reads(live, c, job["id"])


def test_the_log_reads_after_a_released_job_is_refused_at_its_relaunch(
    tmp_path: Path,
) -> None:
    """A running job is held (stopped for a checkpoint), its workdir goes, it is released:
    the relaunch is refused and the job ends FAILED, with the first run's output its log."""
    workdir, ckpt = tmp_path / "wd", tmp_path / "ckpt"
    workdir.mkdir()
    ckpt.mkdir()
    code = (
        f"import sys, time\nsys.stdout.write({LINE.decode()!r}); sys.stdout.flush()\ntime.sleep(60)"
    )
    with live_server(tmp_path, fake_gpus="1x80GiB", preempt_grace=5.0) as live, live.client() as c:
        body = spec("held", code, workdir=str(workdir), checkpoint_dir=str(ckpt), max_restarts=0)
        job = submit(c, body)
        wait_state(c, job["id"], "RUNNING")
        log_path = live.home / "logs" / f"{job['id']}.log"
        wait_for(lambda: log_path.exists() and log_path.read_bytes() == LINE)
        assert c.patch(f"/jobs/{job['id']}", json={"held": True}).status_code == 200
        wait_for(lambda: c.get(f"/jobs/{job['id']}").json()["state"] == "PENDING")
        shutil.rmtree(workdir)
        assert c.patch(f"/jobs/{job['id']}", json={"held": False}).status_code == 200
        done = wait_state(c, job["id"], {"FAILED", "SUCCEEDED", "CANCELLED"})
        assert done["state"] == "FAILED"
        assert "is not a directory" in _events(c, job["id"])[-1]
        _assert_finished_log_reads(live, c, job["id"])


def test_the_log_reads_while_the_node_cannot_relaunch_the_job_and_once_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run exits 3; every relaunch fails on the node (no room: ENOSPC, which also
    deleted the new run's folder), so the job is re-queued with a backoff: its log reads
    while it waits, and for good once it is cancelled."""
    monkeypatch.setattr(jobs, "RESTART_BACKOFF_SECONDS", 0.05)
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        state = live.prepared.app.state.danlu if live.prepared else None
        assert state is not None
        real = state.executor._start
        starts: list[str] = []

        def start(*args: Any, **kwargs: Any) -> Any:
            starts.append(args[0].job_id)
            if len(starts) > 1:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(*args, **kwargs)

        monkeypatch.setattr(state.executor, "_start", start)
        keep = f"import sys\nsys.stdout.write({LINE.decode()!r}); sys.stdout.flush()\n"
        job = submit(c, spec("nodefault", keep + "raise SystemExit(3)", max_restarts=1))
        wait_for(lambda: any(r.startswith(jobs.NODE_FAULT) for r in _events(c, job["id"])))
        assert c.get(f"/jobs/{job['id']}").json()["state"] != "FAILED"
        _assert_log_reads(live, c, job["id"])
        assert c.post(f"/jobs/{job['id']}/cancel").status_code == 200
        assert wait_state(c, job["id"], {"CANCELLED", "FAILED"})["state"] == "CANCELLED"
        _assert_finished_log_reads(live, c, job["id"])
