"""A run record naming process (group) 0: signalled, 0 is the signalling process's own
group, so a damaged ``job.json`` with ``"pgid": 0`` made the poll that found the run's
supervisor lost SIGKILL the control plane's own process group (itself and all it started).
Process ids in the records must be positive, or they read as missing."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from danlu.core.cluster import Cluster
from danlu.executors import JobLaunch, LocalExecutor, Outcome, records, supervise

PY = sys.executable


def _executor(root: Path) -> LocalExecutor:
    return LocalExecutor(Cluster.homogeneous(1, 1), root, base_env={}, cancel_grace=1.0)


@pytest.mark.parametrize("field", ["pid", "pgid", "supervisor_pid"])
def test_a_job_record_with_pid_zero_reads_as_missing(tmp_path: Path, field: str) -> None:
    (tmp_path / supervise.JOB).write_text(json.dumps({field: 0, "start": 7}))
    assert records.read_job(tmp_path) == {"start": 7}


def test_a_supervisor_record_with_pid_zero_reads_as_missing(tmp_path: Path) -> None:
    (tmp_path / supervise.SUPERVISOR).write_text(json.dumps({"pid": 0, "start": 7}))
    assert records.read_supervisor(tmp_path) == {"start": 7}


def test_a_lost_run_with_pgid_zero_kills_no_group_of_the_poller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ex = _executor(tmp_path / "state")
    handle = ex.submit(JobLaunch("j", (PY, "-c", "print('done')")))
    deadline = time.monotonic() + 15
    while ex.poll(handle).running and time.monotonic() < deadline:
        time.sleep(0.02)
    ex._children["j"].wait(15)  # the supervisor has exited: the run is lost once ...
    run_dir = tmp_path / "state" / "runs" / "j"
    (run_dir / supervise.EXIT).unlink()  # ... its exit is gone (a failing disk)
    job = json.loads((run_dir / supervise.JOB).read_text())
    (run_dir / supervise.JOB).write_text(json.dumps({**job, "pgid": 0}))
    groups: list[int] = []
    real_killpg = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        groups.append(pgid)
        if pgid > 0:
            real_killpg(pgid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    status = _executor(tmp_path / "state").poll(handle)
    assert not status.running
    assert status.outcome is Outcome.FAILED
    assert 0 not in groups
