"""A Ray node run no longer SIGKILLs a process group by the pid of its guard once the guard
has exited and been reaped: ``NodeRun.close`` (called when the control plane collects the
ended run, seconds to minutes after its command exited) sent ``killpg(guard_pid, SIGKILL)``,
and by then the pid could be another process's: another run's guard on the node, started in a
session of its own, is the leader of a group whose id is its pid. That whole group was killed.
Now the group is SIGKILLed only while the exited guard, not yet reaped, still holds its pid.

The pid is handed to another process on purpose through the kernel's last pid
(``/proc/sys/kernel/ns_last_pid``, writable by root: CI runs as root); skipped elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_helpers import until_exit

from danlu.executors.ray_actor import NodeRun

PY = sys.executable
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def _take_pid(pid: int) -> subprocess.Popen[bytes] | None:
    """``sleep 60`` in a session of its own (the leader of its own process group) with the
    pid ``pid``, or None when other processes kept taking it first."""
    for _ in range(50):
        LAST_PID.write_text(str(pid - 1))
        proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None


@pytest.fixture
def can_pick_pids() -> None:
    if os.geteuid() != 0 or not os.access(LAST_PID, os.W_OK):
        pytest.skip("handing a pid to a process needs root (/proc/sys/kernel/ns_last_pid)")


@pytest.mark.usefixtures("can_pick_pids")
def test_close_spares_the_group_of_a_process_that_took_the_guards_pid(tmp_path: Path) -> None:
    run = NodeRun([PY, "-c", "print('done')"], ENV, log_dir=str(tmp_path))
    assert until_exit(run)["exit_code"] == 0  # the guard has exited, and is reaped
    guard = run.pid()
    assert guard is not None and not Path(f"/proc/{guard}").exists()
    other = _take_pid(guard)
    if other is None:
        pytest.skip(f"other processes kept taking pid {guard}")
    try:
        run.close()
        time.sleep(0.2)
        assert other.poll() is None, "close SIGKILLed the group of another process"
    finally:
        other.kill()
        other.wait()


@pytest.mark.usefixtures("can_pick_pids")
def test_a_stops_sigkill_after_the_command_exited_spares_that_group(tmp_path: Path) -> None:
    """A stop made after the command exited (a cancel of an ended run) signals nothing."""
    run = NodeRun([PY, "-c", "print('done')"], ENV, log_dir=str(tmp_path))
    until_exit(run)
    guard = run.pid()
    assert guard is not None
    other = _take_pid(guard)
    if other is None:
        pytest.skip(f"other processes kept taking pid {guard}")
    try:
        run.stop("cancel", 0.0)
        run.stop("cancel", 0.1)
        time.sleep(0.4)
        assert other.poll() is None, "a stop SIGKILLed the group of another process"
    finally:
        other.kill()
        other.wait()
        run.close()
