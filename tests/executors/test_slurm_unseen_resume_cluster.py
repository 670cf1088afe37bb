"""Against a real Slurm cluster: a run stopped just after an admin resumed its suspended job
(``scontrol suspend``, ``scontrol resume``), with no poll between to see it suspended, still
gets its SIGTERM. The controller reports the job running at once, but the node's step
resumes a moment later and drops a SIGTERM that reaches it before (``scancel`` succeeds all
the same): sent then, the stop was lost, and the job ran on to the SIGKILL at the end of its
grace without checkpointing. The executor reads when Slurm last resumed the job
(``SuspendTime``) before it sends a SIGTERM, and waits for the step as it does for a resume
a poll saw."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from run_helpers import launch, wait, wait_text
from slurm_cluster import CHECKPOINTS, SlurmCluster, executor_on

from danlu.executors import GpuSlot, Outcome
from danlu.executors.slurmctl import SlurmCommands

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def test_a_stop_right_after_an_unseen_resume_is_not_lost(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    commands = SlurmCommands(slurm.env)
    ex = executor_on(slurm, tmp_path / "state")
    handle = ex.submit(launch("resumed-1", CHECKPOINTS, gpus=(GpuSlot(0, 0),)))
    (slurm_id,) = commands.find("danlu.resumed-1.0")
    wait_text(ex, handle, "ready")
    slurm.run("scontrol", "suspend", str(slurm_id))
    deadline = time.monotonic() + 30
    while commands.jobs([slurm_id])[slurm_id].state != "SUSPENDED":
        assert time.monotonic() < deadline, "Slurm never suspended the job"
        time.sleep(0.1)
    time.sleep(1)  # the node's step surely suspended too
    slurm.run("scontrol", "resume", str(slurm_id))
    try:
        ex.preempt(handle, 600.0)  # no poll saw the job suspended
        # lost, the SIGTERM came only with the SIGKILL at the end of the grace (600 s)
        wait_text(ex, handle, "got SIGTERM", timeout=60)
        status = wait(ex, handle)
        assert (status.outcome, status.exit_code) == (Outcome.PREEMPTED, 75)
    finally:
        commands.cancel(slurm_id, "KILL", full=True)
