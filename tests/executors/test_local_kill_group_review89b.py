"""The local executor's kill of a lost run's process group (``_kill_group``): no signal to a
group id nothing of the job holds any more."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from run_helpers import launch

from danlu.executors import LocalExecutor, local, records, supervise


def _free_pid() -> int:
    """The pid of a process that has exited and been reaped: no process, no group, has it."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_no_killpg_when_leader_gone_and_group_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    pid = _free_pid()
    assert supervise.proc_start_time(pid) is None
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(local.os, "killpg", lambda pg, sig: sent.append((pg, sig)))
    # the leader recorded with a start time it no longer has: gone
    job: dict[str, Any] = {"pid": pid, "pgid": pid, "start": 1}
    assert local._kill_group(job) is False
    assert sent == []  # the free id could be a new group's by the time a signal lands


def test_group_left_by_its_leader_still_killed() -> None:
    """A member the gone leader left in the group is still killed."""
    leader = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.Popen(['sleep', '60'])"],
        start_new_session=True,
    )
    leader.wait()  # reaped: the leader is gone, its child (sleep) still in the group
    deadline = time.monotonic() + 10
    while not (members := supervise.group_members(leader.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert members, "the leader's child was not found in its group"
    try:
        job = {"pid": leader.pid, "pgid": leader.pid, "start": 1}
        assert local._kill_group(job) is True
        deadline = time.monotonic() + 10
        while supervise.group_members(leader.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert supervise.group_members(leader.pid) == []
    finally:
        for member in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)


def test_a_pid_beyond_pid_t_reads_as_missing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    supervise.write_json(
        run_dir / supervise.JOB, {"pid": 2**40, "pgid": 2**40, "start": 5, "started_at": 1.0}
    )
    assert records.read_job(run_dir) == {"start": 5, "started_at": 1.0}
    supervise.write_json(run_dir / supervise.SUPERVISOR, {"pid": 2**31, "start": 5})
    assert records.read_supervisor(run_dir) == {"start": 5}
    supervise.write_json(run_dir / supervise.JOB, {"pid": 4194304, "pgid": 2**31 - 1})
    assert records.read_job(run_dir) == {"pid": 4194304, "pgid": 2**31 - 1}


def test_a_lost_run_whose_record_names_a_group_beyond_pid_t_is_polled(
    ex: LocalExecutor,
) -> None:
    """The supervisor gone, its job record rewritten (damaged) with a group id no process
    can have: the poll raised ``OverflowError`` from ``os.killpg``, at every pass."""
    handle = ex.submit(launch("lost", "import time; time.sleep(60)"))
    run_dir = ex._runs / "lost"
    deadline = time.monotonic() + 15
    while not records.read_job(run_dir):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    job = records.read_job(run_dir)
    os.kill(job["supervisor_pid"], signal.SIGKILL)
    ex._children["lost"].wait()
    supervise.write_json(run_dir / supervise.JOB, {**job, "pid": 2**40, "pgid": 2**40})
    status = ex.poll(handle)
    assert not status.running
    assert status.message == local.SUPERVISOR_LOST
    # the job itself was found by its mark and killed
    deadline = time.monotonic() + 10
    while supervise.alive(job["pid"], job["start"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not supervise.alive(job["pid"], job["start"])
