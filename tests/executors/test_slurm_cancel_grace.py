"""The Slurm executor's cancel with a grace (the control plane cancelling a job gives it its
preemption grace to checkpoint): the stop is recorded as a cancel with the run's own
``preempt_grace`` else the grace given, and a job that takes 2 s to save after SIGTERM is
not killed, where the executor's short cancel grace (1 s here) would kill it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import launch, wait, wait_text
from slurm_cluster import SlurmCluster
from test_local_cancel_grace import SAVES

from danlu.executors import GpuSlot, StopReason
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands

SRC = str(Path(__file__).resolve().parents[2] / "src")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def _executor(slurm: SlurmCluster, state: Path) -> SlurmExecutor:
    return SlurmExecutor(
        SlurmCommands(slurm.env),
        state,
        partition="gpu",
        base_env={"PATH": slurm.env["PATH"], "PYTHONPATH": SRC},
        cancel_grace=1.0,
        poll_interval=0.0,
    )


@pytest.mark.parametrize(("own", "given", "grace"), [(None, 8.0, 8.0), (8.0, 0.5, 8.0)])
def test_a_cancel_with_a_grace_lets_the_job_finish_saving(
    slurm: SlurmCluster, tmp_path: Path, own: float | None, given: float, grace: float
) -> None:
    ex = _executor(slurm, tmp_path / "state")
    job = launch("saves-1", SAVES, gpus=(GpuSlot(0, 1),), preempt_grace=own)
    handle = ex.submit(job)
    wait_text(ex, handle, "ready")
    ex.cancel(handle, given)
    stop = json.loads((tmp_path / "state" / "runs" / "saves-1" / "stop.json").read_text())
    assert (stop["reason"], stop["grace"]) == ("cancel", grace)
    status = wait(ex, handle)
    assert (status.exit_code, status.stop_reason) == (0, StopReason.CANCEL), status
    assert "saved" in ex.logs(handle)[0].decode()
