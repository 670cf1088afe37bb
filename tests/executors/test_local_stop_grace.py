"""A stop whose grace the supervisor could not use: a preemption with an endless grace
(``Infinity`` in ``stop.json``) or a stop record whose grace is not a number raised
(``OverflowError`` from the interval timer, ``ValueError`` from ``float``) in the
supervisor's SIGTERM handler. The supervisor died of it before it forwarded the SIGTERM,
so the job never got the chance to checkpoint: the next poll found the supervisor lost and
SIGKILLed the job, with no exit code."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from run_helpers import wait

from danlu.core.cluster import Cluster
from danlu.executors import Handle, JobLaunch, LocalExecutor, Outcome, supervise

PY = sys.executable
CHECKPOINTS = (
    "import signal, sys, time\n"
    "def stop(*_):\n"
    "    print('term', flush=True)\n"
    "    sys.exit(75)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)
"""A job that exits 75 (checkpointed) on SIGTERM."""


def _executor(root: Path) -> LocalExecutor:
    return LocalExecutor(Cluster.homogeneous(1, 1), root, base_env={}, cancel_grace=1.0)


def _ready(ex: LocalExecutor, job_id: str) -> Handle:
    handle = ex.submit(JobLaunch(job_id, (PY, "-c", CHECKPOINTS)))
    deadline = time.monotonic() + 30
    while b"ready" not in ex.logs(handle)[0]:
        assert time.monotonic() < deadline, ex.logs(handle)[0]
        assert ex.poll(handle).running
        time.sleep(0.02)
    return handle


@pytest.mark.parametrize("grace", [float("inf"), 1e300])
def test_a_preemption_with_an_endless_grace_reaches_the_job(tmp_path: Path, grace: float) -> None:
    ex = _executor(tmp_path / "state")
    handle = _ready(ex, "j")
    ex.preempt(handle, grace)
    status = wait(ex, handle)
    assert status.exit_code == 75, status
    assert status.outcome is Outcome.PREEMPTED
    assert b"term" in ex.logs(handle)[0]


@pytest.mark.parametrize("grace", ["soon", None, [], True])
def test_a_stop_record_with_a_damaged_grace_still_stops_the_job(
    tmp_path: Path, grace: object
) -> None:
    ex = _executor(tmp_path / "state")
    handle = _ready(ex, "j")
    run_dir = tmp_path / "state" / "runs" / "j"
    stop = {"reason": "cancel", "grace": grace, "requested_at": time.time()}
    (run_dir / supervise.STOP).write_text(json.dumps(stop))
    job = json.loads((run_dir / supervise.JOB).read_text())
    os.kill(job["supervisor_pid"], signal.SIGTERM)
    status = wait(ex, handle)
    assert status.exit_code == 75, status
    assert status.message == ""
    assert b"term" in ex.logs(handle)[0]


@pytest.mark.parametrize(
    ("stop", "spec", "expected"),
    [
        ({"grace": 3}, {}, 3.0),
        ({"grace": -2.5}, {}, 0.0),
        ({"grace": float("inf")}, {}, 1e9),  # MAX_GRACE_SECONDS
        ({"grace": float("nan")}, {"cancel_grace": 2}, 2.0),
        ({"grace": "30"}, {"cancel_grace": 2, "preempt_grace": 9}, 9.0),
        ({}, {"cancel_grace": "x", "preempt_grace": None}, 5.0),
    ],
)
def test_stop_grace_is_a_usable_number(
    stop: dict[str, object], spec: dict[str, object], expected: float
) -> None:
    assert supervise._stop_grace(stop, spec) == expected
