"""Against a real Slurm cluster: a run whose job an admin suspended (``scontrol suspend``) is
preempted without an error (Slurm refuses a suspended job a SIGTERM, which came out of the
preemption as a :class:`SlurmError`), and gets its SIGTERM once it is resumed, within its
grace: it checkpoints (exit 75) and ends preempted, though polled at once after the resume
(a SIGTERM sent then was dropped by the node's step, still suspended)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from run_helpers import launch, wait, wait_text
from slurm_cluster import CHECKPOINTS, SlurmCluster, executor_on

from danlu.executors import GpuSlot, Outcome, RunState, StopReason
from danlu.executors.slurmctl import SlurmCommands

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def test_a_suspended_run_is_preempted_once_slurm_resumes_it(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    commands = SlurmCommands(slurm.env)
    ex = executor_on(slurm, tmp_path / "state")
    handle = ex.submit(launch("suspended-1", CHECKPOINTS, gpus=(GpuSlot(0, 0),)))
    (slurm_id,) = commands.find("danlu.suspended-1.0")
    wait_text(ex, handle, "ready")
    slurm.run("scontrol", "suspend", str(slurm_id))
    try:
        deadline = time.monotonic() + 30
        while commands.jobs([slurm_id])[slurm_id].state != "SUSPENDED":
            assert time.monotonic() < deadline, "Slurm never suspended the job"
            time.sleep(0.1)
        ex.preempt(handle, 60.0)  # Slurm refuses the SIGTERM now: no error, sent later
        status = ex.poll(handle)
        assert status.state is RunState.RUNNING and status.stop_reason is StopReason.PREEMPT
    finally:
        slurm.run("scontrol", "resume", str(slurm_id))
    # polled at once: the node's step resumes a moment after the controller says RUNNING,
    # and drops a SIGTERM that reaches it before (the executor waits RESUME_SETTLE for it)
    status = wait(ex, handle)
    assert (status.outcome, status.exit_code) == (Outcome.PREEMPTED, 75)
    logs, _ = ex.logs(handle)
    assert b"got SIGTERM" in logs
