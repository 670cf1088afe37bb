"""An executor closed at the end of one app lifespan is used again in the next (a TestClient
entered twice, an embedding app restarting its lifespan): after ``close()`` each executor
still submits, polls, stops and reports its inventory."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch, wait
from slurm_fakes import started_run

from danlu.executors import GpuSlot, LocalExecutor, Outcome, RunState, StopReason, ray_executor

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_local_executor_works_after_close(ex: LocalExecutor) -> None:
    first = ex.submit(launch("first", "import time; time.sleep(30)", gpus=(GpuSlot(0, 0),)))
    ex.close()
    assert ex.poll(first).running
    ex.cancel(first)
    assert wait(ex, first).stop_reason is StopReason.CANCEL
    ex.close()
    assert len(ex.inventory().nodes) == 1
    second = ex.submit(launch("second", "print('again')", gpus=(GpuSlot(0, 0),)))
    assert wait(ex, second).outcome is Outcome.SUCCEEDED
    assert b"again" in ex.logs(second)[0]
    ex.close()
    assert {h.job_id for h in ex.adopt()} == {"first", "second"}


def test_slurm_executor_works_after_close(tmp_path: Path) -> None:
    commands, _clock, ex, handle = started_run(tmp_path)
    ex.close()
    assert ex.poll(handle).state is RunState.RUNNING
    ex.cancel(handle)
    assert ["scancel", "--signal=TERM", "7"] in commands.cancels
    assert [n.name for n in ex.refresh_inventory().nodes] == ["n1"]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    ray = FakeRay([node("n1")]).install(monkeypatch)
    yield ray
    ray.close_all()


def test_ray_executor_works_after_close(fake: FakeRay, tmp_path: Path) -> None:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SRC}
    ex: Any = ray_executor.RayExecutor(
        tmp_path / "state", address=None, base_env=base, cancel_grace=1.0
    )
    ex.close()
    assert [n.name for n in ex.inventory().nodes] == ["n1"]
    handle = ex.submit(launch("r", "print('ray again')", gpus=(GpuSlot(0, 0),)))
    ex.close()
    status = wait(ex, handle)
    assert status.outcome is Outcome.SUCCEEDED
    deadline = time.monotonic() + 10
    while b"ray again" not in ex.logs(handle)[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b"ray again" in ex.logs(handle)[0]
