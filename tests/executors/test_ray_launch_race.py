"""Two launches of the same job into one state directory at the same time (two Ray
executors on it: a control plane restarted while the old one still ran its pass): the
second found no run directory in its checks, then the first's there when it made its own.
It took that for a failure to write its run files: it deleted the directory, with the
records of the first's run (its actors among them), and reported a node fault."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch

from danlu.core.cluster import Cluster
from danlu.executors import (
    Handle,
    JobAlreadyRunningError,
    JobLaunch,
    NodeLaunchError,
    RunState,
    supervise,
)

pytestmark = pytest.mark.xdist_group("ray")

LONG = "import time; time.sleep(60)"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    ray = FakeRay([node("n1")]).install(monkeypatch)
    try:
        yield ray
    finally:
        ray.close_all()


def test_a_launch_that_finds_the_run_launched_meanwhile_leaves_it_alone(
    fake: FakeRay, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from danlu.executors.ray_executor import RayExecutor

    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    first = RayExecutor(tmp_path / "state", address=None, base_env=base)
    second = RayExecutor(tmp_path / "state", address=None, base_env=base)
    checked = RayExecutor._clear_for
    launched: list[Handle] = []

    def checked_then_raced(self: RayExecutor, job: JobLaunch, cluster: Cluster) -> Path:
        run_dir = checked(self, job, cluster)
        if self is second:  # the first executor launches it between the check and the mkdir
            launched.append(first.submit(launch("twice", LONG)))
        return run_dir

    monkeypatch.setattr(RayExecutor, "_clear_for", checked_then_raced)
    with pytest.raises(JobAlreadyRunningError, match="twice"):
        second.submit(launch("twice", LONG))
    monkeypatch.undo()
    (handle,) = launched
    run_dir = tmp_path / "state" / "runs" / "twice"
    assert (run_dir / supervise.LAUNCH).is_file(), "the running run's records were deleted"
    assert first.poll(handle).state is RunState.RUNNING


def test_a_launch_whose_log_cannot_be_opened_leaves_the_other_launchs_run_alone(
    fake: FakeRay, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second launch failed to open the job's log (out of file descriptors) after the
    first had launched the job: the clean-up of its failure removed the run directory it
    had not made, the first's, with the names of the actors that ran on unseen."""
    from danlu.executors.ray_executor import RayExecutor

    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    first = RayExecutor(tmp_path / "state", address=None, base_env=base)
    second = RayExecutor(tmp_path / "state", address=None, base_env=base)
    opened = RayExecutor._open_log
    launched: list[Handle] = []

    def raced_then_failed(self: RayExecutor, log_dir: Path, job_id: str) -> tuple[Path, int]:
        if self is not second:
            return opened(self, log_dir, job_id)
        launched.append(first.submit(launch("twice", LONG)))
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(RayExecutor, "_open_log", raced_then_failed)
    with pytest.raises(NodeLaunchError, match="twice"):
        second.submit(launch("twice", LONG))
    monkeypatch.undo()
    (handle,) = launched
    run_dir = tmp_path / "state" / "runs" / "twice"
    assert (run_dir / supervise.LAUNCH).is_file(), "the running run's records were deleted"
    assert first.poll(handle).state is RunState.RUNNING
    assert second.adopt() == [handle]


def test_a_launch_that_fails_after_making_its_run_directory_removes_it(
    fake: FakeRay, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a launch made is still removed when it fails (a full disk), and no actor of it
    is left."""
    from danlu.executors.ray_executor import RayExecutor

    ex = RayExecutor(tmp_path / "state", address=None, base_env={})

    def full(path: Path, data: dict[str, object]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(supervise, "write_json", full)
    with pytest.raises(NodeLaunchError):
        ex.submit(launch("full", LONG))
    assert not (tmp_path / "state" / "runs" / "full").exists()
    assert not fake.actors
