"""A cancel the control plane sends gives the job its preemption grace to checkpoint
(``Executor.cancel(handle, grace_seconds)``: the run's own ``preempt_grace`` when its
launch has one, else the grace given), as ``POST /jobs/{id}/cancel`` documents; a cancel
with no grace (a run no job owns) keeps the executor's short cancel grace. Real processes
under the local executor, whose cancel grace here is 0.2 s."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from run_helpers import wait

from danlu.core.cluster import Cluster
from danlu.executors import Handle, JobLaunch, LocalExecutor, Outcome, StopReason

PY = sys.executable
SAVES = (
    "import signal, sys, time\n"
    "saving = []\n"
    "signal.signal(signal.SIGTERM, lambda *_: saving.append(1))\n"
    "print('ready', flush=True)\n"
    "end = time.monotonic() + 60\n"
    "while not saving and time.monotonic() < end:\n"
    "    time.sleep(0.02)\n"
    "time.sleep(2)  # writing its checkpoint\n"
    "print('saved', flush=True)\n"
)
"""A job that takes 2 s to save after SIGTERM, then exits 0."""
IGNORES = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)
"""A job that ignores SIGTERM."""


def _executor(root: Path) -> LocalExecutor:
    return LocalExecutor(Cluster.homogeneous(1, 1), root, base_env={}, cancel_grace=0.2)


def _ready(ex: LocalExecutor, job_id: str, code: str, preempt_grace: float | None) -> Handle:
    """Launch ``code`` and return once it has set its SIGTERM handler."""
    handle = ex.submit(JobLaunch(job_id, (PY, "-c", code), preempt_grace=preempt_grace))
    deadline = time.monotonic() + 30
    while b"ready" not in ex.logs(handle)[0]:
        assert time.monotonic() < deadline, ex.logs(handle)[0]
        assert ex.poll(handle).running, ex.logs(handle)[0]
        time.sleep(0.02)
    return handle


def test_a_cancel_with_a_grace_lets_the_job_finish_saving(tmp_path: Path) -> None:
    ex = _executor(tmp_path / "state")
    handle = _ready(ex, "saves", SAVES, preempt_grace=None)
    ex.cancel(handle, 6.0)
    status = wait(ex, handle)
    assert (status.exit_code, status.signal) == (0, None), (status, ex.logs(handle)[0])
    assert status.stop_reason is StopReason.CANCEL
    assert b"saved" in ex.logs(handle)[0]


def test_the_runs_own_preempt_grace_overrides_a_cancels_grace(tmp_path: Path) -> None:
    """The spec's ``preempt_grace`` (6 s) wins over the control plane's (0.1 s), as at a
    preemption."""
    ex = _executor(tmp_path / "state")
    handle = _ready(ex, "own", SAVES, preempt_grace=6.0)
    ex.cancel(handle, 0.1)
    status = wait(ex, handle)
    assert (status.exit_code, status.signal) == (0, None), (status, ex.logs(handle)[0])
    assert status.stop_reason is StopReason.CANCEL


def test_a_job_ignoring_sigterm_is_killed_after_the_cancels_grace(tmp_path: Path) -> None:
    ex = _executor(tmp_path / "state")
    handle = _ready(ex, "stubborn", IGNORES, preempt_grace=1.0)
    ex.cancel(handle, 30.0)
    status = wait(ex, handle, timeout=30)
    assert status.signal == signal.SIGKILL, status
    assert (status.outcome, status.stop_reason) == (Outcome.FAILED, StopReason.CANCEL)


def test_a_cancel_without_a_grace_keeps_the_short_cancel_grace(tmp_path: Path) -> None:
    """A cancel with no grace (a run whose job is gone) is not held by the launch's
    ``preempt_grace`` (60 s): the executor's 0.2 s, and the job is killed unsaved."""
    ex = _executor(tmp_path / "state")
    handle = _ready(ex, "short", SAVES, preempt_grace=60.0)
    ex.cancel(handle)
    status = wait(ex, handle, timeout=30)
    assert status.signal == signal.SIGKILL, (status, ex.logs(handle)[0])
    assert b"saved" not in ex.logs(handle)[0]
