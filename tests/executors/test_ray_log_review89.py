"""A Ray run's output that cannot be appended to the job's log now (a full disk)
fails neither the poll nor the output: it is appended once the log can be written."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch, wait

from danlu.executors import Outcome, ray_executor, ray_output
from danlu.executors.base import RunState

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    ray = FakeRay([node("n1")]).install(monkeypatch)
    yield ray
    ray.close_all()


def _executor(tmp_path: Path) -> Any:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SRC}
    return ray_executor.RayExecutor(tmp_path / "state", address=None, base_env=base)


def test_a_log_that_cannot_be_written_fails_no_poll_and_loses_no_output(
    fake: FakeRay, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append's ``OSError`` (ENOSPC) came out of ``poll``: no danlu error, it ended the
    control plane's whole pass over every run, at every pass while the disk stayed full.
    The run is not taken as ended while its last output waits (its actors, killed, would
    take it with them), and the output is in the log once there is room again."""
    ex = _executor(tmp_path)
    handle = ex.submit(launch("full-1", "print('the last words')"))
    real = ray_output._append

    def full(log_path: str, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ray_output, "_append", full)
    run = fake.actors[f"danlu.full-1.{handle.attempt}.0"].instance
    for _ in range(600):  # the command exits meanwhile; its output never fits
        assert ex.poll(handle).state is RunState.RUNNING
        if run.exit_code() is not None:
            break
        time.sleep(0.05)
    assert run.exit_code() == 0
    assert ex.poll(handle).state is RunState.RUNNING  # exited, its output still to append
    monkeypatch.setattr(ray_output, "_append", real)
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    assert ex.logs(handle)[0] == b"the last words\n"


def test_a_removed_log_directory_is_made_again(fake: FakeRay, tmp_path: Path) -> None:
    """The log directory removed under a running run (an admin's clean-up): every append
    failed with ENOENT, out of ``poll``."""
    ex = _executor(tmp_path)
    logs = tmp_path / "state" / "logs"
    handle = ex.submit(launch("gone-1", "print('kept')"))
    for path in logs.iterdir():
        path.unlink()
    logs.rmdir()
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    assert ex.logs(handle)[0] == b"kept\n"
