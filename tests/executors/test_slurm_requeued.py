"""A run Slurm requeued without a hold (``scontrol requeue``) after it ran is ``PENDING``
again: its wait counted from its submission, so a run that had run longer than
``pending_limit`` was cancelled at the next poll. Now its wait counts from when it was first
seen ``PENDING`` again, across a new executor instance, and anew at each requeue after it is
seen running again; a run never seen running whose nodes recorded exits (it ran while the
control plane was away) counts from when that is found. No Slurm needed: Slurm's commands
print what each test gives them (:class:`slurm_fakes.Printed`)."""

from __future__ import annotations

import json
from pathlib import Path

from run_helpers import launch
from slurm_fakes import (
    LIMIT,
    NODE,
    Clock,
    Printed,
    cancelled_at_the_limit,
    fake_executor,
    is_failed_launch,
    started_run,
)

from danlu.executors import GpuSlot, Outcome, RunState, slurm_task

REQUEUED = (
    "Slurm kept job 7 PENDING (BeginTime) 120 s after it was first seen PENDING again after "
    "it ran (requeued), past the executor's pending limit of 120 s; it was cancelled and the "
    "run counts as a failed launch"
)


def _cancelled(commands: Printed) -> None:
    """Slurm reports job 7 cancelled."""
    commands.squeue("CANCELLED")
    commands.printed["scontrol show job"] = "JobId=7 JobState=CANCELLED ExitCode=0:15"


def test_a_run_requeued_after_it_ran_counts_its_wait_from_its_requeue(tmp_path: Path) -> None:
    """It ran an hour, then was requeued: the whole limit from when it was first seen
    ``PENDING`` again, and across new executor instances (the control plane restarted)."""
    commands, clock, _ex, handle = started_run(tmp_path)
    clock.now += 3600.0
    ex = fake_executor(commands, tmp_path / "state", clock)  # restarted while it ran
    commands.squeue("PENDING", "BeginTime")  # scontrol requeue 7
    status = ex.poll(handle)
    assert (status.state, status.started_at) == (RunState.RUNNING, None)
    assert status.message == "Slurm job 7 PENDING (BeginTime)"
    assert commands.cancels == []
    clock.now += LIMIT - 1
    ex = fake_executor(commands, tmp_path / "state", clock)  # restarted while it waited
    assert ex.poll(handle).state is RunState.RUNNING
    assert commands.cancels == []
    clock.now += 1
    status = ex.poll(handle)
    assert status.message.endswith(
        "; waited 120 s (the pending limit) since it was first seen PENDING again after it "
        "ran (requeued): cancelled"
    )
    assert commands.cancels == [["scancel", "7"]]
    _cancelled(commands)
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    assert is_failed_launch(status), status
    assert status.message.startswith(REQUEUED), status.message


def test_each_requeue_after_the_run_was_seen_running_again_counts_anew(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    clock.now += 3600.0
    commands.squeue("PENDING", "BeginTime")
    ex.poll(handle)
    clock.now += 100.0
    commands.squeue("RUNNING")  # started again
    assert ex.poll(handle).started_at is not None
    clock.now += 3600.0
    commands.squeue("PENDING", "BeginTime")  # requeued again: counted from now
    ex.poll(handle)
    cancelled_at_the_limit(ex, handle, commands, clock)


def test_a_run_requeued_while_the_control_plane_was_away_counts_from_then(
    tmp_path: Path,
) -> None:
    """Never seen running, but its node recorded its command's exit (killed by the requeue's
    SIGTERM): it ran, and is given up ``pending_limit`` seconds after that is found, as a
    failed launch whatever its node recorded."""
    commands = Printed({"scontrol show node": NODE + "\n", "sbatch": "7\n"})
    commands.squeue("PENDING", "None")
    clock = Clock()
    ex = fake_executor(commands, tmp_path / "state", clock)
    handle = ex.submit(launch("held-1", "pass", gpus=(GpuSlot(0, 0),)))
    clock.now += 3600.0  # the control plane was away while it ran and was requeued
    done = slurm_task.exit_path(tmp_path / "state" / "runs" / "held-1", "n1")
    done.write_text(json.dumps({"exit_code": 143, "finished_at": clock.now - 60.0}))
    commands.squeue("PENDING", "BeginTime")
    ex = fake_executor(commands, tmp_path / "state", clock)
    assert ex.poll(handle).state is RunState.RUNNING
    assert commands.cancels == []
    cancelled_at_the_limit(ex, handle, commands, clock)
    _cancelled(commands)
    status = ex.poll(handle)
    assert (status.outcome, status.exit_code, status.started_at) == (Outcome.FAILED, None, None)
    assert status.message.startswith(REQUEUED), status.message


def test_a_given_up_run_that_slurm_starts_before_its_cancel_keeps_its_wait(
    tmp_path: Path,
) -> None:
    """Seen ``RUNNING`` between its cancel and its end, a given-up run still ends as the
    requeued run it was given up as, its wait counted from its requeue."""
    commands, clock, ex, handle = started_run(tmp_path)
    clock.now += 3600.0
    commands.squeue("PENDING", "BeginTime")
    ex.poll(handle)
    clock.now += LIMIT
    ex.poll(handle)
    assert commands.cancels == [["scancel", "7"]]
    commands.squeue("RUNNING")
    ex.poll(handle)
    _cancelled(commands)
    status = ex.poll(handle)
    assert (status.outcome, status.exit_code) == (Outcome.FAILED, None)
    assert status.message.startswith(REQUEUED), status.message


def test_a_pending_run_never_seen_running_still_counts_from_its_submission(
    tmp_path: Path,
) -> None:
    """Seen in a state danlu does not know is not seen running: no requeue then."""
    commands = Printed({"scontrol show node": NODE + "\n", "sbatch": "7\n"})
    commands.squeue("", "None")
    clock = Clock()
    ex = fake_executor(commands, tmp_path / "state", clock)
    handle = ex.submit(launch("pend-1", "pass", gpus=(GpuSlot(0, 0),)))
    ex.poll(handle)
    clock.now += LIMIT
    commands.squeue("PENDING", "PartitionDown")
    assert "of its submission: cancelled" in ex.poll(handle).message
    assert commands.cancels == [["scancel", "7"]]
