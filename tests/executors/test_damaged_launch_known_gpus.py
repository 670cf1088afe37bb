"""A local run whose launch record is missing or damaged while its supervisor still runs
holds only the GPUs its supervisor's environment names (``CUDA_VISIBLE_DEVICES``, set by
the launch from the run's GPUs): every GPU of the host was held until it exited, so one
such run on one GPU kept every other job from launching anywhere."""

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

CLUSTER = Cluster.homogeneous(1, 3)


def _executor(state: Path) -> LocalExecutor:
    return LocalExecutor(CLUSTER, state, base_env={}, cancel_grace=1.0)


@pytest.fixture
def ex(tmp_path: Path) -> Iterator[LocalExecutor]:
    executor = _executor(tmp_path / "state")
    yield executor
    executor.close()


def _damaged(ex: LocalExecutor, job_id: str, *gpus: GpuSlot) -> tuple[Path, int]:
    """Start a long sleep of ``job_id`` on ``gpus``, rewrite its launch record once it has
    started; its run directory and its supervisor's pid."""
    ex.submit(launch(job_id, "import time; time.sleep(60)", gpus=gpus))
    run_dir = ex._runs / job_id
    deadline = time.monotonic() + 30
    while "supervisor_pid" not in records.read_job(run_dir):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    (run_dir / supervise.LAUNCH).write_text(f'{{"job_id": "{job_id}", "gpus": []}}')
    return run_dir, int(records.read_job(run_dir)["supervisor_pid"])


def _end(pid: int, run_dir: Path) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while records.read_exit(run_dir) is None and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_damaged_running_run_holds_only_the_gpus_its_supervisor_was_given(
    ex: LocalExecutor, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir, pid = _damaged(ex, "held-1", GpuSlot(0, 1), GpuSlot(0, 2))
    restarted = _executor(tmp_path / "state")
    try:
        with caplog.at_level(logging.WARNING, logger="danlu.executors.rundirs"):
            for gpu in (1, 2):
                with pytest.raises(GpusBusyError, match="held by job held-1"):
                    restarted.submit(launch("other-1", "pass", gpus=(GpuSlot(0, gpu),)))
            # the GPU it was not given is free
            assert restarted.submit(launch("other-2", "pass", gpus=(GpuSlot(0, 0),))) == (
                Handle("other-2", 0)
            )
        warned = [r.getMessage() for r in caplog.records if "held-1" in r.getMessage()]
        assert len(warned) == 1 and "GPU(s) 0/1, 0/2" in warned[0] and f"kill {pid}" in warned[0]
    finally:
        _end(pid, run_dir)
        restarted.close()


def test_a_damaged_running_share_holds_its_gpu_as_a_share(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    share = GpuSlot(0, 0, memory=1 << 30)
    run_dir, pid = _damaged_share(ex, share)
    restarted = _executor(tmp_path / "state")
    try:
        with pytest.raises(GpusBusyError, match="held by job share-1"):
            restarted.submit(launch("whole-1", "pass", gpus=(GpuSlot(0, 0),)))
        # another share of it passes, as beside a run whose record is whole
        assert restarted.submit(launch("share-2", "pass", gpus=(share,))) == Handle("share-2", 0)
    finally:
        _end(pid, run_dir)
        restarted.close()


def _damaged_share(ex: LocalExecutor, share: GpuSlot) -> tuple[Path, int]:
    ex.submit(launch("share-1", "import time; time.sleep(60)", gpus=(share,)))
    run_dir = ex._runs / "share-1"
    deadline = time.monotonic() + 30
    while "supervisor_pid" not in records.read_job(run_dir):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    (run_dir / supervise.LAUNCH).unlink()
    return run_dir, int(records.read_job(run_dir)["supervisor_pid"])


def test_a_damaged_running_run_without_gpus_holds_none(ex: LocalExecutor, tmp_path: Path) -> None:
    run_dir, pid = _damaged(ex, "cpu-1")
    restarted = _executor(tmp_path / "state")
    try:
        for gpu in range(3):
            job = launch(f"other-{gpu}", "pass", gpus=(GpuSlot(0, gpu),))
            assert restarted.submit(job) == Handle(f"other-{gpu}", 0)
    finally:
        _end(pid, run_dir)
        restarted.close()
