"""A local run whose launch record is missing or damaged (its job deleted or rewrote it) while
its supervisor still runs keeps its GPUs: after a restart of the control plane (a new
executor, which reads the runs from their records) another job was launched onto them, the
run's GPUs not counted (``_held`` dropped every run without a readable record). Which GPUs it
holds is not known, so no launch is made until it has exited, with a warning saying how to
stop it."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import launch

from danlu.core.cluster import Cluster
from danlu.executors import GpusBusyError, GpuSlot, Handle, LocalExecutor, records, supervise

CLUSTER = Cluster.homogeneous(1, 2)


def _executor(state: Path, devices: dict[tuple[int, int], str] | None = None) -> LocalExecutor:
    return LocalExecutor(CLUSTER, state, base_env={}, cancel_grace=1.0, devices=devices)


@pytest.fixture
def ex(tmp_path: Path) -> Iterator[LocalExecutor]:
    executor = _executor(tmp_path / "state")
    yield executor
    executor.close()


@pytest.mark.parametrize("damage", ["rewritten", "deleted"])
def test_a_damaged_running_run_keeps_its_gpus_after_a_restart(
    ex: LocalExecutor, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    ex.submit(launch("held-1", "import time; time.sleep(60)", gpus=(GpuSlot(0, 0),)))
    run_dir = ex._runs / "held-1"
    deadline = time.monotonic() + 30
    while "supervisor_pid" not in records.read_job(run_dir):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    pid = int(records.read_job(run_dir)["supervisor_pid"])
    if damage == "rewritten":
        (run_dir / supervise.LAUNCH).write_text('{"job_id": "held-1", "gpus": []}')
    else:
        (run_dir / supervise.LAUNCH).unlink()
    # restarted with other device indices: the run's CUDA_VISIBLE_DEVICES (0) names no GPU
    # of it, so which GPUs the run holds is not known (test_damaged_launch_known_gpus: one
    # it names is held alone)
    restarted = _executor(tmp_path / "state", {(0, 0): "5", (0, 1): "6"})
    try:
        with caplog.at_level(logging.WARNING, logger="danlu.executors.rundirs"):
            for gpu in (0, 1):  # which of the GPUs it holds is not known
                with pytest.raises(GpusBusyError, match="held by job held-1"):
                    restarted.submit(launch("other-1", "pass", gpus=(GpuSlot(0, gpu),)))
        warned = [r.getMessage() for r in caplog.records if "held-1" in r.getMessage()]
        assert len(warned) == 1 and f"kill {pid}" in warned[0]  # once, saying how to stop it
        assert not (restarted._runs / "other-1").exists()
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while records.read_exit(run_dir) is None and time.monotonic() < deadline:
            time.sleep(0.05)
    # once its supervisor has exited, the GPUs are free
    assert restarted.submit(launch("other-1", "pass", gpus=(GpuSlot(0, 0),))) == Handle(
        "other-1", 0
    )
    restarted.close()
