"""The local executor on a node whose disk fills up: a launch that cannot write its records is
a :class:`NodeLaunchError` (the node's fault, not the job's), and it leaves neither a run
directory nor a process behind, not even a job that had already started. The disk filling
is a ``write_json`` that fails with ENOSPC at a chosen record; the processes are real."""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from danlu.core.cluster import Cluster
from danlu.executors import (
    JobLaunch,
    LaunchError,
    LocalExecutor,
    NodeLaunchError,
    Outcome,
    is_node_fault,
    supervise,
)
from danlu.executors.supervise import proc_start_time

PY = sys.executable


@pytest.fixture
def ex(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(
        Cluster.homogeneous(1, 2), tmp_path / "state", base_env={}, cancel_grace=1.0
    )


def _full_at(
    monkeypatch: pytest.MonkeyPatch, name: str, before: Callable[[], None] = lambda: None
) -> list[str]:
    """Make the executor's write of the record ``name`` fail with ENOSPC (after ``before``);
    the names of the records written, in order."""
    real = supervise.write_json
    written: list[str] = []

    def write_json(path: Path, data: dict[str, Any]) -> None:
        written.append(path.name)
        if path.name == name:
            before()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data)

    monkeypatch.setattr(supervise, "write_json", write_json)
    return written


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_no_room_for_the_launch_record_starts_nothing(
    ex: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    written = _full_at(monkeypatch, supervise.LAUNCH)
    job = JobLaunch("j", (PY, "-c", f"open({str(marker)!r}, 'w').write('x')"))
    with pytest.raises(NodeLaunchError, match="No space left on device"):
        ex.submit(job)
    assert written == [supervise.LAUNCH]
    assert not (ex._runs / "j").exists()
    time.sleep(0.3)
    assert not marker.exists()

    monkeypatch.undo()  # room again: the same job launches
    handle = ex.submit(job)
    deadline = time.monotonic() + 15
    while ex.poll(handle).running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ex.poll(handle).outcome is Outcome.SUCCEEDED
    assert marker.read_text() == "x"


def test_no_room_for_the_supervisor_record_stops_the_started_job(
    ex: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor and its job already run when the last record fails: both are stopped,
    since no later executor could find them (the job would hold its GPUs unseen)."""
    pid_file = tmp_path / "pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"

    def job_started() -> None:
        deadline = time.monotonic() + 15
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)

    _full_at(monkeypatch, "supervisor.json", before=job_started)
    with pytest.raises(NodeLaunchError):
        ex.submit(JobLaunch("j", (PY, "-c", code)))
    pid = int(pid_file.read_text())
    start = proc_start_time(pid)
    deadline = time.monotonic() + 10
    while not _gone(pid) and proc_start_time(pid) == start and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(pid) or proc_start_time(pid) != start
    assert not (ex._runs / "j").exists()
    assert not ex._children


def test_a_missing_program_is_still_the_jobs_fault(ex: LocalExecutor) -> None:
    assert not is_node_fault(LaunchError("working directory is missing"))
    assert not is_node_fault(OSError(errno.ENOENT, "No such file or directory"))
    assert not is_node_fault(OSError(errno.E2BIG, "Argument list too long"))
    assert is_node_fault(OSError(errno.EMFILE, "Too many open files"))
    assert is_node_fault(NodeLaunchError("disk full"))
