"""A Slurm run whose launch record is missing or damaged (its job rewrote it: the record is
on a filesystem the nodes share) while its Slurm job still runs is not deleted by the next
launch of its job nor by a discard: its directory was removed, the Slurm job ran
on unseen on the job's GPUs next to the relaunch, its tasks writing their exits into the new
run's directory. The Slurm job is found by its name (``danlu.JOB_ID.ATTEMPT``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import launch
from slurm_fakes import Printed, started_run

from danlu.executors import ExecutorError, GpuSlot, Handle, JobAlreadyRunningError, supervise
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmError, SlurmUnavailableError


def _damaged(tmp_path: Path, damage: str) -> tuple[Printed, SlurmExecutor, Path]:
    commands, _clock, ex, handle = started_run(tmp_path)
    run_dir = ex._runs / handle.job_id
    if damage == "rewritten":
        (run_dir / supervise.LAUNCH).write_text("{not json")
    else:
        (run_dir / supervise.LAUNCH).unlink()
    return commands, ex, run_dir


@pytest.mark.parametrize("damage", ["rewritten", "deleted"])
def test_a_relaunch_keeps_a_running_slurm_run_whose_launch_record_is_damaged(
    tmp_path: Path, damage: str
) -> None:
    commands, ex, run_dir = _damaged(tmp_path, damage)
    commands.printed["squeue"] = (
        "5|RUNNING|other\n7|RUNNING|danlu.held-1.0\n9|RUNNING|danlu.held-1.x.0\n"
    )
    again = launch("held-1", "pass", gpus=(GpuSlot(0, 0),), attempt=2)
    with pytest.raises(JobAlreadyRunningError, match=r"scancel 7\)"):
        ex.submit(again)
    assert (run_dir / "batch.sh").is_file()  # the running run's records kept
    with pytest.raises(ExecutorError, match="still runs"):
        ex.discard("held-1")
    assert (run_dir / "batch.sh").is_file()
    # once Slurm reports it ended (and another job's run, held-1.x, runs), it launches again
    commands.printed["squeue"] = "7|COMPLETED|danlu.held-1.0\n9|RUNNING|danlu.held-1.x.0\n"
    assert ex.submit(again) == Handle("held-1", 2)


def test_slurm_unreachable_deletes_nothing(tmp_path: Path) -> None:
    commands, ex, run_dir = _damaged(tmp_path, "rewritten")
    commands.printed["squeue"] = SlurmError("squeue failed: timed out")
    with pytest.raises(SlurmUnavailableError, match="still runs"):
        ex.discard("held-1")
    assert (run_dir / "batch.sh").is_file()
