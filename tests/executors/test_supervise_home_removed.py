"""A run's supervisor whose control plane was stopped and whose state directory was then
removed (``rm -rf`` of the server's home): a SIGTERM stopped its job, and then it kept
trying, for ten minutes, to record the job's exit in a run directory that was no more, and
had to be killed by its pid. It ends promptly now, its job's process group with it, whether
or not its run directory is still there."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from danlu.core.cluster import Cluster
from danlu.executors import JobLaunch, LocalExecutor, records, supervise

IGNORES_TERM = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)
"""A job that ignores SIGTERM: only the supervisor's SIGKILL after the grace ends it."""


def _started(ex: LocalExecutor, job_id: str, code: str) -> tuple[int, int]:
    """Launch ``python -c code`` as ``job_id``; its supervisor's pid and its job's pid, once
    the job printed ``ready``."""
    handle = ex.submit(JobLaunch(job_id, (sys.executable, "-c", code)))
    deadline = time.monotonic() + 30
    while b"ready" not in ex.logs(handle)[0]:
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    job = records.read_job(ex._runs / job_id)
    return int(job["supervisor_pid"]), int(job["pid"])


def _gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` (reaped by its parent, or a zombie) is gone within
    ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if supervise.proc_start_time(pid) is None:  # (a zombie counts as gone)
            return True
        time.sleep(0.05)
    return False


ENDS_ON_TERM = "import time\nprint('ready', flush=True)\ntime.sleep(120)\n"
"""A job that ends on SIGTERM (the default action)."""


@pytest.mark.parametrize("code", [ENDS_ON_TERM, IGNORES_TERM], ids=["ends-on-term", "ignores-term"])
def test_a_supervisor_whose_run_directory_was_removed_ends_on_sigterm(
    tmp_path: Path, code: str
) -> None:
    home = tmp_path / "home"
    ex = LocalExecutor(Cluster.homogeneous(1, 1), home / "state", base_env={}, cancel_grace=0.5)
    sup, job = _started(ex, "orphaned", code)
    try:
        shutil.rmtree(home)  # the control plane stopped, its home removed
        os.kill(sup, signal.SIGTERM)
        assert _gone(job, 15), "the job's process outlived the stop"
        assert _gone(sup, 15), "the supervisor did not end on SIGTERM"
    finally:
        for pid in (job, sup):
            if supervise.proc_start_time(pid) is not None:
                os.kill(pid, signal.SIGKILL)
        ex.close()


def test_a_stop_ends_the_retries_of_an_exit_the_full_disk_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the disk is full the supervisor tries to record the exit for ten minutes; a
    stop signalled meanwhile ends the tries (after one more): the supervisor exits, 0
    exactly when its job did."""
    stops = [0]
    tries = []

    def full(path: Path, data: dict[str, object]) -> None:
        tries.append(path)
        stops[0] = 1  # stopped while it tried
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(supervise, "write_json", full)
    done = {"exit_code": 1, "signal": None, "finished_at": time.time()}
    assert supervise._record_exit(tmp_path, done, lambda: stops[0]) == 1
    assert len(tries) == 2  # the try it was stopped in, and one more
