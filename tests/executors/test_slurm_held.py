"""A run Slurm holds after a requeue (``REQUEUE_HOLD``, ``SPECIAL_EXIT``, ``RESV_DEL_HOLD``)
kept its danlu run, and its GPUs, until someone released or cancelled it: ``pending_limit``
applied to ``PENDING`` only, and a stop sent SIGTERM to the steps of a job that had none.
Now a held run is given up ``pending_limit`` seconds after it was first seen held (cancelled,
a failed launch whose error names Slurm's state and the limit), and a stop cancels it at
once. No Slurm needed: Slurm's commands print what each test gives them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import launch
from slurm_fakes import (
    LIMIT,
    NODE,
    START,
    Clock,
    Printed,
    cancelled_at_the_limit,
    fake_executor,
    is_failed_launch,
    started_run,
)

from danlu.executors import GpuSlot, Outcome, RunState, slurm_task
from danlu.executors.slurmctl import HELD_STATES, RUNNING_STATES


def test_the_held_states_are_slurm_states_a_job_may_run_again_from() -> None:
    assert HELD_STATES <= RUNNING_STATES


@pytest.mark.parametrize("held", sorted(HELD_STATES))
def test_a_run_held_past_the_pending_limit_is_cancelled_and_fails_as_a_launch(
    tmp_path: Path, held: str
) -> None:
    """The limit counts from when the run was first seen held, not from its submission (it
    ran an hour before its hold), and across a new executor instance (a restart)."""
    commands, clock, ex, handle = started_run(tmp_path)
    clock.now += 3600.0  # it ran an hour, then was requeued and held
    commands.squeue(held, "JobHeldAdmin")
    status = ex.poll(handle)
    assert status.state is RunState.RUNNING and status.started_at is None
    assert status.message == f"Slurm job 7 {held} (JobHeldAdmin)"
    clock.now += LIMIT - 1
    ex = fake_executor(commands, tmp_path / "state", clock)  # the control plane restarted
    assert ex.poll(handle).state is RunState.RUNNING
    assert commands.cancels == []  # held for less than the limit
    clock.now += 1
    status = ex.poll(handle)
    assert status.state is RunState.RUNNING and "pending limit" in status.message
    assert commands.cancels == [["scancel", "7"]]  # the whole job, not its steps
    commands.squeue("CANCELLED")
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobState=CANCELLED Reason=None ExitCode=0:15 StartTime={START} EndTime={START}"
    )
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    assert is_failed_launch(status), status
    assert status.message.startswith(
        f"Slurm kept job 7 {held} (JobHeldAdmin) 120 s after it was first seen held, past "
        "the executor's pending limit of 120 s; it was cancelled and the run counts as a "
        "failed launch. A held job runs again only once released (scontrol release 7)"
    ), status.message


def test_a_held_run_whose_nodes_recorded_exits_is_still_a_failed_launch(
    tmp_path: Path,
) -> None:
    """A job whose command exited (``SPECIAL_EXIT``: an epilog requeued and held it for its
    exit code) left its nodes' exit records: given up, it did not end with that exit."""
    commands, clock, ex, handle = started_run(tmp_path)
    done = slurm_task.exit_path(tmp_path / "state" / "runs" / "held-1", "n1")
    done.write_text(json.dumps({"exit_code": 0, "finished_at": clock.now}))
    commands.squeue("SPECIAL_EXIT")
    ex.poll(handle)
    clock.now += LIMIT
    ex.poll(handle)
    commands.squeue("CANCELLED")
    commands.printed["scontrol show job"] = "JobId=7 JobState=CANCELLED ExitCode=0:0"
    status = ex.poll(handle)
    assert (status.outcome, status.exit_code) == (Outcome.FAILED, None)
    assert "SPECIAL_EXIT" in status.message and "pending limit of 120 s" in status.message


def test_a_release_keeps_counting_from_the_hold_and_a_run_again_forgets_it(
    tmp_path: Path,
) -> None:
    """Released, the job is ``PENDING`` again: its wait counts on from its hold (and not from
    its submission, long past); started again, a later hold counts anew."""
    commands, clock, ex, handle = started_run(tmp_path)
    clock.now += 3600.0
    commands.squeue("REQUEUE_HOLD")
    ex.poll(handle)
    clock.now += 60.0
    commands.squeue("PENDING", "BeginTime")  # released
    assert ex.poll(handle).state is RunState.RUNNING
    assert commands.cancels == []
    commands.squeue("RUNNING")
    ex.poll(handle)
    clock.now += 100.0
    commands.squeue("REQUEUE_HOLD")  # held again: counted from now
    ex.poll(handle)
    cancelled_at_the_limit(ex, handle, commands, clock)


def test_a_release_then_pending_past_the_limit_is_given_up_as_held(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    commands.squeue("REQUEUE_HOLD")
    ex.poll(handle)
    clock.now += 30.0
    commands.squeue("PENDING", "Resources")
    ex.poll(handle)
    clock.now += LIMIT - 30.0
    status = ex.poll(handle)
    assert commands.cancels == [["scancel", "7"]]
    assert "since it was first seen held" in status.message
    commands.squeue("CANCELLED")
    commands.printed["scontrol show job"] = "JobId=7 JobState=CANCELLED ExitCode=0:0"
    status = ex.poll(handle)
    assert status.outcome is Outcome.FAILED and status.exit_code is None
    assert status.message.startswith("Slurm kept job 7 PENDING (Resources) 120 s after it was")


@pytest.mark.parametrize("stop", ["cancel", "preempt"])
def test_a_stop_of_a_held_run_cancels_its_slurm_job(tmp_path: Path, stop: str) -> None:
    """Nothing of a held job runs: a SIGTERM to its steps reached nothing, and the run
    stayed held with its GPUs."""
    commands, _clock, ex, handle = started_run(tmp_path)
    commands.squeue("REQUEUE_HOLD")
    if stop == "cancel":
        ex.cancel(handle)
    else:
        ex.preempt(handle, 30.0)
    assert commands.cancels == [["scancel", "7"]]
    ex.poll(handle)  # cancelled again while Slurm still lists it held
    assert commands.cancels == [["scancel", "7"]] * 2


def test_a_pending_run_is_still_given_up_from_its_submission(tmp_path: Path) -> None:
    commands = Printed({"scontrol show node": NODE + "\n", "sbatch": "7\n"})
    commands.squeue("PENDING", "PartitionDown")
    clock = Clock()
    ex = fake_executor(commands, tmp_path / "state", clock)
    handle = ex.submit(launch("pend-1", "pass", gpus=(GpuSlot(0, 0),)))
    clock.now += LIMIT
    assert "of its submission: cancelled" in ex.poll(handle).message
    commands.squeue("CANCELLED")
    commands.printed["scontrol show job"] = "JobId=7 JobState=CANCELLED ExitCode=0:0"
    status = ex.poll(handle)
    assert status.outcome is Outcome.FAILED and status.exit_code is None
    assert status.message.startswith(
        "Slurm did not start job 7 within 120 s of its submission (PENDING: PartitionDown), "
        "past the executor's pending limit of 120 s; it was cancelled"
    )
