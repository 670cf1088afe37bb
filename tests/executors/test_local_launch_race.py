"""Two launches of the same job into one state directory at the same time (two executors
on it: a control plane restarted while the old one still ran its pass): the second found
no run directory in its checks, then found the first's there when it made its own. It
took that for a failure of its own launch and deleted the directory, with the records of
the first's run, which ran on unseen, its GPUs taken as free."""

from __future__ import annotations

import errno
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from danlu.core.cluster import Cluster
from danlu.executors import (
    Handle,
    JobAlreadyRunningError,
    JobLaunch,
    LaunchError,
    LocalExecutor,
    NodeLaunchError,
    RunState,
    supervise,
)

SLEEP = (sys.executable, "-c", "import time; time.sleep(60)")


def _stop(first: LocalExecutor, handle: Handle, run_dir: Path) -> None:
    """End the first executor's run of ``twice`` and close it: cancelled while its records
    are there; else (deleted) its supervisor is stopped, which stops it as for a cancel."""
    if (run_dir / supervise.LAUNCH).is_file():
        first.cancel(handle)
        while first.poll(handle).running:
            time.sleep(0.05)
    else:
        first._children["twice"].terminate()
        first._children["twice"].wait(30)
    first.close()


def test_a_launch_that_finds_the_run_launched_meanwhile_leaves_it_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster.homogeneous(1, 1)
    first = LocalExecutor(cluster, tmp_path / "state", base_env={}, cancel_grace=0.5)
    second = LocalExecutor(cluster, tmp_path / "state", base_env={}, cancel_grace=0.5)
    checked = LocalExecutor._clear_for
    launched = []

    def checked_then_raced(self: LocalExecutor, job: JobLaunch, c: Cluster) -> Path:
        run_dir = checked(self, job, c)
        if self is second:  # the first executor launches it between the check and the mkdir
            launched.append(first.submit(JobLaunch("twice", SLEEP)))
        return run_dir

    monkeypatch.setattr(LocalExecutor, "_clear_for", checked_then_raced)
    with pytest.raises(JobAlreadyRunningError, match="twice"):
        second.submit(JobLaunch("twice", SLEEP))
    monkeypatch.undo()
    (handle,) = launched
    run_dir = tmp_path / "state" / "runs" / "twice"
    try:
        assert (run_dir / supervise.LAUNCH).is_file(), "the running run's records were deleted"
        assert first.poll(handle).state is RunState.RUNNING
        assert second.adopt() == [handle]
    finally:
        _stop(first, handle, run_dir)


def test_a_launch_whose_log_cannot_be_opened_leaves_the_other_launchs_run_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second launch failed to open the job's log (out of file descriptors) after the
    first had launched the job: the clean-up of its failure removed the run directory it
    had not made yet, the first's, with the records of a run that went on unseen."""
    cluster = Cluster.homogeneous(1, 1)
    first = LocalExecutor(cluster, tmp_path / "state", base_env={}, cancel_grace=0.5)
    second = LocalExecutor(cluster, tmp_path / "state", base_env={}, cancel_grace=0.5)
    opened = LocalExecutor._log_file
    launched = []

    def raced_then_failed(self: LocalExecutor, log_dir: Path, job_id: str) -> Any:
        if self is not second:
            return opened(self, log_dir, job_id)
        launched.append(first.submit(JobLaunch("twice", SLEEP)))
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(LocalExecutor, "_log_file", raced_then_failed)
    with pytest.raises(LaunchError):  # (NodeLaunchError: the host is out of descriptors)
        second.submit(JobLaunch("twice", SLEEP))
    monkeypatch.undo()
    (handle,) = launched
    run_dir = tmp_path / "state" / "runs" / "twice"
    try:
        assert (run_dir / supervise.LAUNCH).is_file(), "the running run's records were deleted"
        assert first.poll(handle).state is RunState.RUNNING
    finally:
        _stop(first, handle, run_dir)


def test_a_launch_that_fails_after_making_its_run_directory_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a launch made is still removed when it fails (a full disk)."""
    ex = LocalExecutor(Cluster.homogeneous(1, 1), tmp_path / "state", base_env={})

    def full(path: Path, data: dict[str, Any]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(supervise, "write_json", full)
    with pytest.raises(NodeLaunchError):
        ex.submit(JobLaunch("full", SLEEP))
    assert not (tmp_path / "state" / "runs" / "full").exists()
