"""A local run started as another OS account (``DANLU_RUN_AS=user``) whose launch record is
missing or damaged while it still runs holds the GPUs it was given, as any other run does:
its supervisor (the control plane's, root) was started with a bare environment, without the
``CUDA_VISIBLE_DEVICES`` by which the executor learns a damaged run's GPUs, so it held every
GPU of the host until it exited. The supervisor's environment now carries the run's GPU
pinning; one started without it (by an earlier version) still holds every GPU."""

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
    GpusBusyError,
    GpuSlot,
    Handle,
    JobLaunch,
    LocalExecutor,
    local,
    records,
    supervise,
)

pytestmark = pytest.mark.slow

CLUSTER = Cluster.homogeneous(1, 3)


def _executor(state: Path) -> LocalExecutor:
    return LocalExecutor(CLUSTER, state, base_env={"PATH": "/usr/bin:/bin"}, cancel_grace=1.0)


@pytest.fixture
def ex(tmp_path: Path) -> Iterator[LocalExecutor]:
    executor = _executor(tmp_path / "state")
    yield executor
    executor.close()


def _damaged(ex: LocalExecutor, os_user: str, job_id: str, *gpus: GpuSlot) -> tuple[Path, int]:
    """Start a sleep of ``job_id`` as ``os_user`` on ``gpus`` and delete its launch record
    once it has started; its run directory and its supervisor's pid."""
    ex.submit(JobLaunch(job_id, ("/bin/sh", "-c", "exec sleep 60"), gpus=gpus, run_as=os_user))
    run_dir = ex._runs / job_id
    deadline = time.monotonic() + 30
    while "supervisor_pid" not in records.read_job(run_dir):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    (run_dir / supervise.LAUNCH).unlink()
    return run_dir, int(records.read_job(run_dir)["supervisor_pid"])


def _end(pid: int, run_dir: Path) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while records.read_exit(run_dir) is None and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_damaged_run_as_another_account_holds_only_its_gpus(
    ex: LocalExecutor, tmp_path: Path, os_user: str
) -> None:
    run_dir, pid = _damaged(ex, os_user, "held-1", GpuSlot(0, 1))
    restarted = _executor(tmp_path / "state")
    try:
        with pytest.raises(GpusBusyError, match="held by job held-1"):
            restarted.submit(launch("other-1", "pass", gpus=(GpuSlot(0, 1),)))
        # the GPUs it was not given are free
        for gpu in (0, 2):
            job = launch(f"other-{gpu}", "pass", gpus=(GpuSlot(0, gpu),))
            assert restarted.submit(job) == Handle(f"other-{gpu}", 0)
        # the job's own environment is not the supervisor's: it is read from stdin
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"CUDA_VISIBLE_DEVICES=1" in environ and b"DANLU_JOB_ID=held-1" not in environ
    finally:
        _end(pid, run_dir)
        restarted.close()


def test_a_damaged_share_as_another_account_holds_its_gpu_as_a_share(
    ex: LocalExecutor, tmp_path: Path, os_user: str
) -> None:
    share = GpuSlot(0, 0, memory=1 << 30)
    run_dir, pid = _damaged(ex, os_user, "share-1", share)
    restarted = _executor(tmp_path / "state")
    try:
        with pytest.raises(GpusBusyError, match="held by job share-1"):
            restarted.submit(launch("whole-1", "pass", gpus=(GpuSlot(0, 0),)))
        assert restarted.submit(launch("share-2", "pass", gpus=(share,))) == Handle("share-2", 0)
    finally:
        _end(pid, run_dir)
        restarted.close()


def test_a_damaged_run_of_a_supervisor_without_its_gpus_holds_every_gpu(
    ex: LocalExecutor, tmp_path: Path, os_user: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A supervisor started by an earlier version (a bare environment): its GPUs are not
    known, and every GPU is held until it exits."""
    monkeypatch.setattr(local, "_supervisor_env", lambda env, account: dict(local.SUPERVISOR_ENV))
    run_dir, pid = _damaged(ex, os_user, "old-1", GpuSlot(0, 1))
    restarted = _executor(tmp_path / "state")
    try:
        for gpu in range(3):
            with pytest.raises(GpusBusyError, match="held by job old-1"):
                restarted.submit(launch("other-1", "pass", gpus=(GpuSlot(0, gpu),)))
    finally:
        _end(pid, run_dir)
        restarted.close()
