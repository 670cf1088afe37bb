"""The local executor's stop signals the run's supervisor through a pidfd, only while it is
the process its records name (``supervise.signal_process``): it checked the supervisor's
start time, then sent a plain ``kill(pid)``, and a supervisor that exited in between left
its pid to whatever process took it next, which got the SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import launch

from danlu.core.cluster import Cluster
from danlu.executors import LocalExecutor, records, supervise


@pytest.fixture
def stranger() -> Iterator[int]:
    """The pid of a process that is no descendant of this one (its parent exited at once)."""
    out = subprocess.run(
        ["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"],
        check=True,
        capture_output=True,
        text=True,
        start_new_session=True,
    ).stdout
    pid = int(out)
    yield pid
    if supervise.proc_start_time(pid) is not None:
        os.kill(pid, signal.SIGKILL)


def test_a_stop_does_not_signal_a_process_that_took_the_supervisors_pid(
    tmp_path: Path, stranger: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ex = LocalExecutor(Cluster.homogeneous(1, 1), tmp_path / "state", base_env={})
    handle = ex.submit(launch("j1", "import time; time.sleep(60)"))
    run_dir = ex._runs / "j1"
    deadline = time.monotonic() + 30
    while "supervisor_pid" not in (job := records.read_job(run_dir)):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    real = int(job["supervisor_pid"])
    start = supervise.proc_start_time(stranger)
    assert start is not None
    try:
        # the supervisor recorded exited, and ``stranger`` has its pid now; the check of
        # its start time was made before that (it saw the supervisor alive)
        job.update(supervisor_pid=stranger, supervisor_start=start + 1)
        supervise.write_json(run_dir / supervise.JOB, job)
        monkeypatch.setattr(supervise, "alive", lambda pid, start: True)
        ex.cancel(handle)
        time.sleep(0.3)
        assert supervise.proc_start_time(stranger) == start  # not signalled
    finally:
        monkeypatch.undo()
        os.kill(real, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while supervise.proc_start_time(real) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        ex.close()
