"""Where each run of a job begins in its log (``Executor.log_runs``), as the local executor
keeps it: the launch record of the job's last run carries the earlier runs' starts, and a
launch that fails after deleting the previous run's record keeps them (this instance's
memory) for ``GET /jobs/{id}/logs/runs``. Real processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from run_helpers import wait

from danlu.core.cluster import Cluster
from danlu.executors import Handle, InvalidLaunchError, JobLaunch, LocalExecutor
from danlu.executors.base import RunStart

PY = sys.executable


def _run(ex: LocalExecutor, attempt: int, text: str, workdir: str | None = None) -> Handle:
    """Launch attempt ``attempt`` of job ``job``, printing ``text``, and wait for its exit."""
    launch = JobLaunch("job", (PY, "-c", f"print({text!r})"), attempt=attempt, workdir=workdir)
    handle = ex.submit(launch)
    wait(ex, handle)
    return handle


def test_each_run_s_start_is_carried_to_the_next_record(tmp_path: Path) -> None:
    ex = LocalExecutor(Cluster.homogeneous(1, 1), tmp_path / "state", base_env={})
    first = _run(ex, 1, "one")
    assert [(r.attempt, r.offset) for r in ex.log_runs(first)] == [(1, 0)]
    _run(ex, 2, "two")
    third = _run(ex, 4, "three")
    starts = ex.log_runs(third)
    assert [(r.attempt, r.offset) for r in starts] == [(1, 0), (2, 4), (4, 8)]
    assert all(isinstance(r, RunStart) and r.started_at > 0 for r in starts)
    assert ex.log_runs(Handle("job", 1)) == starts  # whichever run the handle names
    assert ex.logs(third)[0] == b"one\ntwo\nthree\n"


def test_a_launch_that_failed_after_deleting_the_record_keeps_them(tmp_path: Path) -> None:
    ex = LocalExecutor(Cluster.homogeneous(1, 1), tmp_path / "state", base_env={})
    _run(ex, 1, "one")
    _run(ex, 2, "two")
    with pytest.raises(InvalidLaunchError):
        _run(ex, 3, "never", workdir=str(tmp_path / "gone"))
    assert [(r.attempt, r.offset) for r in ex.log_runs(Handle("job", 3))] == [(1, 0), (2, 4)]
    last = _run(ex, 4, "four")
    assert [(r.attempt, r.offset) for r in ex.log_runs(last)] == [(1, 0), (2, 4), (4, 8)]
