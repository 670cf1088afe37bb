"""A Slurm job state danlu does not know (``squeue`` printing ``123||...``, or a state a newer
Slurm adds) no longer ends the run: ``SlurmJob.running`` was False for any state outside
danlu's list, and the run was settled as ended although the Slurm job could still run. Now
only the states Slurm ends a job in end a run; any other is taken as running, with a warning
logged once. No Slurm needed: Slurm's commands print what each test gives them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from run_helpers import launch
from slurm_fakes import NODE, START, Printed

from danlu.executors import GpuSlot, Outcome, RunState
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmError, SlurmJob

SLURM_LIVE_STATES = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETING",
    "CONFIGURING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "RESIZING",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
    "RESV_DEL_HOLD",
    "UPDATE_DB",
    "POWER_UP_NODE",
    "EXPEDITING",
    "LAUNCH_FAILED",
    "RECONFIG_FAIL",
)
"""Slurm's job states (base states and the flags ``squeue`` may print as the state) in which
the job may still run, or run again once released (the held requeued ones)."""
SLURM_END_STATES = (
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "REVOKED",
)
"""Slurm's job states in which the job is over on this cluster."""


@pytest.mark.parametrize("state", SLURM_LIVE_STATES)
def test_a_state_slurm_may_still_run_a_job_in_keeps_it_running(state: str) -> None:
    job = SlurmJob(7, state)
    assert job.running
    assert job.known


@pytest.mark.parametrize("state", SLURM_END_STATES)
def test_a_state_slurm_ends_a_job_in_ends_it(state: str) -> None:
    job = SlurmJob(7, state)
    assert not job.running
    assert job.known


def test_squeue_printing_an_empty_or_unknown_state_keeps_the_job_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each odd state is warned of once, however often ``squeue`` prints it."""
    commands = Printed(
        {
            "squeue": (
                "12||N/A|None\n"
                f"13|FUTURE_STATE|{START}|None\n"
                f"14|COMPLETED|{START}|None\n"
                f"15|RUNNING|{START}|None\n"
            )
        }
    )
    with caplog.at_level(logging.WARNING, logger="danlu.executors.slurmctl"):
        for _ in range(3):
            jobs = commands.jobs([12, 13, 14, 15])
            assert {i: (job.state, job.running, job.known) for i, job in jobs.items()} == {
                12: ("", True, False),
                13: ("FUTURE_STATE", True, False),
                14: ("COMPLETED", False, True),
                15: ("RUNNING", True, True),
            }
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2
    assert "Slurm job 12 in state ''" in warned[0] and "COMPLETED" in warned[0]
    assert "Slurm job 13 in state 'FUTURE_STATE'" in warned[1]


@pytest.mark.parametrize("odd", ["", "FUTURE_STATE"])
@pytest.mark.parametrize("end", ["completed", "forgotten"])
def test_a_run_whose_slurm_state_is_unknown_is_not_settled_as_ended(
    tmp_path: Path, odd: str, end: str
) -> None:
    """It stays running, saying so, and Slurm's full record of the job is not read (it is
    read once the job has ended); it ends when Slurm reports an end state, or once Slurm
    has forgotten the job (its ``MinJobAge`` after it ended)."""
    commands = Printed(
        {
            "scontrol show node": NODE + "\n",
            "sbatch": "7\n",
            "squeue": f"7|{odd}|{START}|None\n",
            "scontrol show job": f"JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0 "
            f"StartTime={START} EndTime={START}\n",
        }
    )
    ex = SlurmExecutor(commands, tmp_path / "state", poll_interval=0.0)
    handle = ex.submit(launch("odd-1", "pass", gpus=(GpuSlot(0, 0),)))
    for _ in range(2):
        status = ex.poll(handle)
        assert status.state is RunState.RUNNING
        assert status.message == f"Slurm job 7 in unknown state {odd!r}, taken as running"
    assert "scontrol show job" not in commands.asked
    if end == "completed":
        commands.printed["squeue"] = f"7|COMPLETED|{START}|None\n"
    else:
        commands.printed["squeue"] = SlurmError("squeue -h failed: Invalid job id specified")
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    if end == "completed":
        assert (status.outcome, status.exit_code) == (Outcome.SUCCEEDED, 0)
    else:
        assert status.outcome is Outcome.FAILED
        assert "Slurm no longer knows job 7" in status.message
