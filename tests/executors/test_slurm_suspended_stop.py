"""A stop of a Slurm run whose job an admin suspended (``scontrol suspend``: ``SUSPENDED``)
is recorded and carried on at the polls, not refused: Slurm refuses a SIGTERM to a suspended
job (``scancel --signal=TERM``: "Job can not be altered now, try again later", as the real
cluster says) and takes only a SIGKILL, and the refusal came out of the cancel or
preemption as an :class:`ExecutorError` (the control plane's report an error), though the
stop was recorded and its SIGTERM due. The SIGTERM is sent once Slurm runs the job again;
the SIGKILL comes after the grace either way."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from slurm_fakes import Printed, started_run

from danlu.executors import RunState, StopReason
from danlu.executors.slurmctl import SlurmError

SUSPENDED = (
    "scancel failed: scancel: error: Kill job error on job id 7: Job can not be altered now, "
    "try again later"
)


class SuspendedJob(Printed):
    """Slurm's commands of job 7, whose ``scancel --signal=TERM`` Slurm refuses while
    ``squeue`` reports it suspended (recorded all the same); a SIGKILL or a cancel taken."""

    def run(self, argv: Sequence[str], **kwargs: object) -> str:
        out = super().run(argv, **kwargs)  # type: ignore[arg-type]
        if "--signal=TERM" in argv and "|SUSPENDED|" in str(self.printed["squeue"]):
            raise SlurmError(SUSPENDED)
        return out


def test_a_suspended_run_s_stop_is_sent_once_it_runs_again(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    suspended = SuspendedJob(commands.printed)
    ex._commands = suspended
    suspended.squeue("SUSPENDED")
    ex.preempt(handle, 30.0)  # refused by Slurm: not raised, the SIGTERM is due
    assert [a for a in suspended.cancels if "--signal=TERM" in a] == []
    status = ex.poll(handle)
    assert status.state is RunState.RUNNING and status.stop_reason is StopReason.PREEMPT
    suspended.squeue("RUNNING")  # resumed within the grace: it gets its SIGTERM now
    clock.now += 10
    assert ex.poll(handle).state is RunState.RUNNING
    assert suspended.cancels[-1] == ["scancel", "--signal=TERM", "7"]
    ex.poll(handle)
    assert len([a for a in suspended.cancels if "--signal=TERM" in a]) == 1  # once


def test_a_suspended_run_is_killed_after_its_grace(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    suspended = SuspendedJob(commands.printed)
    ex._commands = suspended
    suspended.squeue("SUSPENDED")
    ex.cancel(handle)
    clock.now += 60  # past the cancel grace, still suspended
    ex.poll(handle)
    assert [a for a in suspended.cancels if "--signal=KILL" in a]
    assert not [a for a in suspended.cancels if "--signal=TERM" in a]
