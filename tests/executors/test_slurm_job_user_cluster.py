"""Against a real Slurm cluster: ``squeue -j`` lists each job's user (``%U``, ``%u``), and
``scontrol show job`` names it (``UserId``), which is the account danlu submits as for its
runs' jobs, so a run's job is its own (:meth:`SlurmCommands.owns`) and it polls as
running."""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import pytest
from run_helpers import launch, wait
from slurm_cluster import SlurmCluster

from danlu.executors import GpuSlot, RunState, StopReason
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands

SRC = str(Path(__file__).resolve().parents[2] / "src")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


@pytest.mark.parametrize(("user", "job_id"), [(None, "mine-1"), (getpass.getuser(), "mine-2")])
def test_squeue_names_the_user_of_danlu_s_own_jobs(
    slurm: SlurmCluster, tmp_path: Path, user: str | None, job_id: str
) -> None:
    commands = SlurmCommands(slurm.env, user=user)
    base = {"PATH": slurm.env["PATH"], "PYTHONPATH": SRC}
    ex = SlurmExecutor(
        commands, tmp_path / "state", partition="gpu", base_env=base, poll_interval=0.0
    )
    code = "import time; time.sleep(60)"
    handle = ex.submit(launch(job_id, code, gpus=(GpuSlot(0, 0),)))
    try:
        listed = commands.jobs(commands.find(f"danlu.{job_id}.0"))
        (job,) = listed.values()
        assert (job.uid, job.user) == (str(os.getuid()), getpass.getuser())
        assert job.name == f"danlu.{job_id}.0" and commands.owns(job)
        # scontrol's full record of it too (UserId=name(uid))
        full = commands.job(job.job_id)
        assert full is not None and (full.uid, full.user) == (str(os.getuid()), getpass.getuser())
        assert full.name == job.name and commands.owns(full)
        assert ex.poll(handle).state is RunState.RUNNING
    finally:
        ex.cancel(handle)
    assert wait(ex, handle).stop_reason is StopReason.CANCEL
