"""Two launches of the same job into one state directory at the same time (two Ray
executors on it: a control plane restarted while the old one still ran its pass): the
second found no run directory in its checks, then the first's there when it made its own.
It took that for a failure to write its run files: it deleted the directory, with the
records of the first's run (its actors among them), and reported a node fault."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch

from danlu.core.cluster import Cluster
from danlu.executors import Handle, JobAlreadyRunningError, JobLaunch, RunState, supervise

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
