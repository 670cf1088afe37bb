"""A Ray run that exits while nobody polls it (the control plane down) ended when
its last node's command exited, as its actors stamped it, not when the executor next looked:
its run time and GPU-hours are billed up to its exit."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch, wait

from danlu.executors import GpuSlot, Outcome

pytestmark = pytest.mark.xdist_group("ray")


class LateClock:
    """The executor's clock, an hour on: the poll comes that much after the exit."""

    def __call__(self) -> float:
        return time.time() + 3600.0


def test_a_run_that_exited_unwatched_ended_at_its_last_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from danlu.executors.ray_executor import RayExecutor

    fake = FakeRay([node("n1"), node("n2")]).install(monkeypatch)
    try:
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        ex = RayExecutor(tmp_path / "state", address=None, base_env=base, clock=LateClock())
        before = time.time()
        handle = ex.submit(launch("quick-1", "print('done')", gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
        time.sleep(1.0)  # both commands exit meanwhile, unwatched
        status = wait(ex, handle)
        assert status.outcome is Outcome.SUCCEEDED
        assert status.finished_at is not None and before <= status.finished_at < time.time()
    finally:
        fake.close_all()
