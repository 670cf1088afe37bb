"""The local executor reads a job's log, all its runs, also once a later launch of the job
failed and took the record of the run before: the control plane asks through the
job's current attempt, which never ran, and got no bytes while the output was on disk."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from danlu.executors import (
    Handle,
    InvalidLaunchError,
    JobLaunch,
    LocalExecutor,
    Outcome,
    UnknownHandleError,
)

PY = sys.executable
OUT = b"the first run's output\n"


def _ran_then_refused(ex: LocalExecutor, workdir: Path) -> None:
    """Job ``j1``: attempt 1 prints :data:`OUT` and exits 3; attempt 2's launch is refused
    (its working directory is gone), which deletes attempt 1's record."""
    workdir.mkdir()
    code = f"import sys; sys.stdout.write({OUT.decode()!r})"
    first = ex.submit(JobLaunch("j1", (PY, "-c", code), workdir=str(workdir), attempt=1))
    deadline = time.monotonic() + 15
    while (status := ex.poll(first)).running:
        assert time.monotonic() < deadline, "attempt 1 never ended"
        time.sleep(0.02)
    assert status.outcome is Outcome.SUCCEEDED
    workdir.rmdir()
    with pytest.raises(InvalidLaunchError, match="is not a directory"):
        ex.submit(JobLaunch("j1", (PY, "-c", "pass"), workdir=str(workdir), attempt=2))
    assert ex.adopt() == []  # no record of either run is left


@pytest.mark.parametrize("attempt", [1, 2, 3], ids=["ran", "refused", "later"])
def test_the_job_log_reads_through_any_attempt_once_a_launch_failed(
    ex: LocalExecutor, tmp_path: Path, attempt: int
) -> None:
    _ran_then_refused(ex, tmp_path / "wd")
    handle = Handle("j1", attempt)
    assert ex.logs(handle) == (OUT, len(OUT))
    assert ex.logs(handle, 4, 5) == (OUT[4:9], 9)
    assert ex.log_size(handle) == len(OUT)


def test_a_job_without_runs_or_log_is_unknown(ex: LocalExecutor, tmp_path: Path) -> None:
    with pytest.raises(UnknownHandleError):
        ex.logs(Handle("never", 1))
    with pytest.raises(UnknownHandleError):
        ex.log_size(Handle("never", 1))
    _ran_then_refused(ex, tmp_path / "wd")
    ex.discard("j1")  # the retention: the log goes too
    with pytest.raises(UnknownHandleError):
        ex.logs(Handle("j1", 2))


def test_a_log_linked_out_of_the_log_directory_is_not_read(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    _ran_then_refused(ex, tmp_path / "wd")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"not the job's\n")
    log = tmp_path / "state" / "logs" / "j1.log"
    log.unlink()
    log.symlink_to(secret)
    with pytest.raises(UnknownHandleError):
        ex.logs(Handle("j1", 2))
