"""A run Slurm requeued after it ran (``scontrol requeue``, or a requeue-hold then a release)
runs again in the same run directory, where its nodes' exit records of before the requeue
were still read as the new run's: a node's checkpoint (75) of before stopped the whole job at
its new start (a spurious gang stop), and a node's exit of before, still there when the new
run ended, could be taken for its exit. Now only the exits written since the run was last
started count (:func:`danlu.executors.slurm_exits.note_start`), across a new executor
instance too, while every exit written since its new start counts. No Slurm needed: Slurm's
commands print what each test gives them (:class:`test_slurm_held.Printed`)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from run_helpers import launch
from slurm_fakes import START, Clock, Printed, fake_executor

from danlu.executors import GpuSlot, Handle, Outcome, RunState, slurm_task
from danlu.executors.slurm import SlurmExecutor

NODES = "\n".join(
    f"NodeName={name} NodeAddr=127.0.0.1 Gres=gpu:4 CPUTot=2 RealMemory=1024 State=IDLE"
    for name in ("n1", "n2")
)
START_AT = datetime.strptime(START, "%Y-%m-%dT%H:%M:%S").timestamp()
"""When Slurm first started the run (:data:`START`, local time as Slurm prints it)."""
RESTART_AT = START_AT + 3660.0
RESTART = datetime.fromtimestamp(RESTART_AT).strftime("%Y-%m-%dT%H:%M:%S")
"""Slurm's ``StartTime`` of the run's second start, an hour after its first."""


def _gang(tmp_path: Path) -> tuple[Printed, Clock, SlurmExecutor, Handle]:
    """Slurm job 7 of a two-node run, submitted and running."""
    commands = Printed({"scontrol show node": NODES + "\n", "sbatch": "7\n"})
    commands.squeue("RUNNING")
    clock = Clock()
    clock.now = START_AT
    ex = fake_executor(commands, tmp_path / "state", clock)
    handle = ex.submit(launch("gang-1", "pass", gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    assert ex.poll(handle).state is RunState.RUNNING
    return commands, clock, ex, handle


def _exit(tmp_path: Path, node: str, code: int, when: float) -> None:
    """The task on ``node`` records exit ``code`` at ``when``."""
    path = slurm_task.exit_path(tmp_path / "state" / "runs" / "gang-1", node)
    path.write_text(json.dumps({"exit_code": code, "finished_at": when}))


def _running_again(commands: Printed) -> None:
    """Slurm runs job 7 again, started at :data:`RESTART`."""
    commands.printed["squeue"] = f"7|RUNNING|{RESTART}|None\n"


@pytest.mark.parametrize("wait", ["PENDING", "REQUEUE_HOLD"])
def test_a_checkpoint_of_before_a_requeue_does_not_stop_the_run_again(
    tmp_path: Path, wait: str
) -> None:
    """n1 checkpointed as the requeue's SIGTERM reached it, n2 was killed before it recorded
    its exit: started again (released, for a hold), the run was stopped at once."""
    commands, clock, ex, handle = _gang(tmp_path)
    clock.now += 3600.0
    _exit(tmp_path, "n1", 75, clock.now - 30.0)  # before the poll that sees it requeued
    commands.squeue(wait, "BeginTime")  # scontrol requeue 7 (or requeuehold)
    ex.poll(handle)
    clock.now += 60.0
    ex = fake_executor(commands, tmp_path / "state", clock)  # the control plane restarted
    _running_again(commands)
    assert ex.poll(handle).state is RunState.RUNNING
    assert commands.cancels == []  # no gang stop
    ex = fake_executor(commands, tmp_path / "state", clock)
    ex.poll(handle)
    assert commands.cancels == []
    clock.now += 600.0
    _exit(tmp_path, "n2", 75, clock.now)  # a checkpoint of the new run's: the gang stops
    ex.poll(handle)
    assert commands.cancels == [["scancel", "--signal=TERM", "7"]]


def test_a_requeue_the_executor_did_not_see_is_found_by_slurms_new_start_time(
    tmp_path: Path,
) -> None:
    """The control plane was away while the run was requeued and started again: Slurm's
    ``StartTime`` of the run is a later one, and the exits of before it are not the run's."""
    commands, clock, _ex, handle = _gang(tmp_path)
    clock.now += 3600.0
    _exit(tmp_path, "n1", 75, clock.now)
    clock.now += 600.0
    _running_again(commands)
    ex = fake_executor(commands, tmp_path / "state", clock)
    assert ex.poll(handle).state is RunState.RUNNING
    assert commands.cancels == []


def test_the_exit_of_a_run_started_again_is_its_own(tmp_path: Path) -> None:
    """Before its requeue n1 recorded exit 143 (the requeue's SIGTERM); started again, n2
    failed (exit 1) and ``srun --kill-on-bad-exit`` killed n1 before it recorded one: the
    run failed with exit 1, not with the 143 of before."""
    commands, clock, ex, handle = _gang(tmp_path)
    clock.now += 3600.0
    _exit(tmp_path, "n1", 143, clock.now - 30.0)
    commands.squeue("PENDING", "BeginTime")
    ex.poll(handle)
    clock.now += 60.0
    _running_again(commands)
    ex.poll(handle)
    clock.now += 600.0
    _exit(tmp_path, "n2", 1, clock.now)
    commands.squeue("FAILED")
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0 StartTime={RESTART} "
        f"EndTime={RESTART}"
    )
    status = fake_executor(commands, tmp_path / "state", clock).poll(handle)
    assert status.state is RunState.EXITED
    assert (status.outcome, status.exit_code, status.signal) == (Outcome.FAILED, 1, None)


def test_a_run_requeued_while_away_and_ended_has_its_last_runs_exit(tmp_path: Path) -> None:
    """Requeued and ended while the control plane was away: Slurm's record of the job names
    its last start, and the exits recorded before it are not the run's."""
    commands, clock, ex, handle = _gang(tmp_path)
    clock.now += 3600.0
    _exit(tmp_path, "n1", 143, clock.now)
    clock.now += 3600.0
    _exit(tmp_path, "n2", 1, clock.now)
    commands.squeue("FAILED")
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0 StartTime={RESTART} "
        f"EndTime={RESTART}"
    )
    status = ex.poll(handle)
    assert (status.outcome, status.exit_code, status.signal) == (Outcome.FAILED, 1, None)


def test_an_exit_written_since_the_new_start_counts_before_the_run_is_seen_again(
    tmp_path: Path,
) -> None:
    """Seen ``PENDING`` after it ran, then ended before it was seen running again: its
    nodes' exits of its new run are its exit, though no poll saw that run."""
    commands, clock, ex, handle = _gang(tmp_path)
    clock.now += 3600.0
    _exit(tmp_path, "n1", 143, clock.now - 30.0)
    commands.squeue("PENDING", "BeginTime")
    ex.poll(handle)
    clock.now += 90.0
    _exit(tmp_path, "n1", 0, clock.now)
    _exit(tmp_path, "n2", 0, clock.now)
    commands.squeue("COMPLETED")
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0 StartTime={RESTART} EndTime={RESTART}"
    )
    status = ex.poll(handle)
    assert (status.outcome, status.exit_code) == (Outcome.SUCCEEDED, 0)


def test_a_first_runs_exits_all_count(tmp_path: Path) -> None:
    """Never requeued, a run's exits are its own, however early its nodes' clocks put them."""
    commands, _clock, ex, handle = _gang(tmp_path)
    _exit(tmp_path, "n1", 75, 0.0)
    ex.poll(handle)
    assert commands.cancels == [["scancel", "--signal=TERM", "7"]]


def test_a_gang_stop_before_a_requeue_does_not_kill_the_run_started_again(
    tmp_path: Path,
) -> None:
    """Requeued during its gang stop's grace, the run started again was SIGKILLed once that
    grace (of its earlier start) was over; now its new start may be gang stopped anew."""
    commands, clock, ex, handle = _gang(tmp_path)
    clock.now += 3600.0
    _exit(tmp_path, "n1", 75, clock.now)
    ex.poll(handle)
    assert commands.cancels == [["scancel", "--signal=TERM", "7"]]  # the gang stop
    clock.now += 10.0
    commands.squeue("PENDING", "BeginTime")  # requeued within the grace
    ex.poll(handle)
    clock.now += 50.0
    _running_again(commands)
    ex.poll(handle)
    clock.now += 600.0  # long past the earlier start's grace
    ex = fake_executor(commands, tmp_path / "state", clock)
    assert ex.poll(handle).state is RunState.RUNNING
    assert commands.cancels == [["scancel", "--signal=TERM", "7"]]
    _exit(tmp_path, "n2", 75, clock.now)
    ex.poll(handle)
    assert commands.cancels == [["scancel", "--signal=TERM", "7"]] * 2
