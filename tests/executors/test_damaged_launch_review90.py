"""A run whose launch record is missing or damaged (its job deleted or rewrote it) while its
supervisor still runs is not deleted by the next launch of its job nor by a discard
(review 90): its directory was removed, the supervisor ran on unseen on its GPUs, and a
relaunch's new directory got the old supervisor's ``job.json``, heartbeat and exit."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import launch

from danlu.core.cluster import Cluster
from danlu.executors import (
    ExecutorError,
    Handle,
    JobAlreadyRunningError,
    LocalExecutor,
    records,
    supervise,
)


@pytest.fixture
def ex(tmp_path: Path) -> Iterator[LocalExecutor]:
    executor = LocalExecutor(
        Cluster.homogeneous(1, 1), tmp_path / "state", base_env={}, cancel_grace=1.0
    )
    yield executor
    executor.close()


def _started(ex: LocalExecutor, job_id: str) -> tuple[Path, int]:
    """The run directory of ``job_id``'s run of a long sleep, and its supervisor's pid, once
    the job has started."""
    ex.submit(launch(job_id, "import time; time.sleep(60)"))
    run_dir = ex._runs / job_id
    deadline = time.monotonic() + 30
    while "supervisor_pid" not in records.read_job(run_dir):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    return run_dir, int(records.read_job(run_dir)["supervisor_pid"])


def _stop(ex: LocalExecutor, pid: int, run_dir: Path) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while records.read_exit(run_dir) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    ex.close()


@pytest.mark.parametrize("damage", ["rewritten", "deleted"])
def test_a_relaunch_keeps_a_running_run_whose_launch_record_is_damaged(
    ex: LocalExecutor, damage: str
) -> None:
    run_dir, pid = _started(ex, "j1")
    if damage == "rewritten":
        (run_dir / supervise.LAUNCH).write_text("{not json")
    else:
        (run_dir / supervise.LAUNCH).unlink()
    try:
        with pytest.raises(JobAlreadyRunningError, match=rf"kill {pid}\b"):
            ex.submit(launch("j1", "print('second')", attempt=2))
        assert (run_dir / supervise.JOB).is_file()  # the running run's records kept
        assert supervise.alive(pid, supervise.proc_start_time(pid))
    finally:
        _stop(ex, pid, run_dir)
    # once its supervisor is gone, the job launches again
    assert ex.submit(launch("j1", "print('second')", attempt=2)) == Handle("j1", 2)


def test_a_discard_keeps_a_running_run_whose_launch_record_is_damaged(
    ex: LocalExecutor,
) -> None:
    run_dir, pid = _started(ex, "j2")
    (run_dir / supervise.LAUNCH).write_text("[]")
    try:
        with pytest.raises(ExecutorError, match="still runs"):
            ex.discard("j2")
        assert (run_dir / supervise.JOB).is_file()
    finally:
        _stop(ex, pid, run_dir)
    ex.discard("j2")
    assert not run_dir.exists()


def test_a_pid_the_job_wrote_in_its_records_blocks_nothing(ex: LocalExecutor) -> None:
    """A damaged run whose records name a live process that is no supervisor of it (the
    test's own) is deleted as before: no launch refused for another process's pid."""
    run_dir = ex._runs / "j3"
    run_dir.mkdir(mode=0o700)
    me = os.getpid()
    supervise.write_json(
        run_dir / supervise.SUPERVISOR, {"pid": me, "start": supervise.proc_start_time(me)}
    )
    (run_dir / supervise.LAUNCH).write_text("{")
    assert ex.submit(launch("j3", "print('ok')")) == Handle("j3", 0)
