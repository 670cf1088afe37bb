"""A Ray run whose launch record is missing or damaged while its actors are alive is not
deleted by the next launch of its job nor by a discard: its directory was
removed, and the new attempt's actors (named apart) started next to the old ones, which ran
on unseen on the job's GPUs. The actors are found by their names
(``danlu.JOB_ID.ATTEMPT.RANK``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch

from danlu.executors import (
    ExecutorError,
    ExecutorUnavailableError,
    GpuSlot,
    Handle,
    JobAlreadyRunningError,
    supervise,
)

pytestmark = pytest.mark.xdist_group("ray")

LONG = "import time; time.sleep(60)"


@pytest.mark.parametrize("damage", ["rewritten", "deleted"])
def test_a_relaunch_keeps_a_ray_run_whose_launch_record_is_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    from danlu.executors.ray_executor import RayExecutor

    fake = FakeRay([node("n1")]).install(monkeypatch)
    try:
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        ex = RayExecutor(tmp_path / "state", address=None, base_env=base)
        ex.submit(launch("rj", LONG, gpus=(GpuSlot(0, 0),), attempt=1))
        ex.submit(launch("rj.x", LONG, gpus=(GpuSlot(0, 1),)))  # another job's, named alike
        run_dir = ex._runs / "rj"
        if damage == "rewritten":
            (run_dir / supervise.LAUNCH).write_text("{not json")
        else:
            (run_dir / supervise.LAUNCH).unlink()
        again = launch("rj", LONG, gpus=(GpuSlot(0, 0),), attempt=2)
        with pytest.raises(JobAlreadyRunningError, match=r"actors danlu\.rj\.1\.0 are alive"):
            ex.submit(again)
        assert run_dir.is_dir() and fake.live("danlu.rj.1.") == ["danlu.rj.1.0"]
        with pytest.raises(ExecutorError, match="still runs"):
            ex.discard("rj")
        assert run_dir.is_dir()
        fake.fail("list_named_actors", RuntimeError("GCS gone"))
        with pytest.raises(ExecutorUnavailableError, match="rj still run"):
            ex.submit(again)
        assert run_dir.is_dir()
        fake.actors["danlu.rj.1.0"].dead()  # once its actor is gone, the job launches again
        assert ex.submit(again) == Handle("rj", 2)
    finally:
        fake.close_all()
