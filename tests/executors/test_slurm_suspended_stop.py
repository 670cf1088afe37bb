"""A stop of a Slurm run whose job an admin suspended (``scontrol suspend``: ``SUSPENDED``)
is recorded and carried on at the polls, not refused: Slurm refuses a SIGTERM to a suspended
job (``scancel --signal=TERM``: "Job can not be altered now, try again later", as the real
cluster says) and takes only a SIGKILL, and the refusal came out of the cancel or
preemption as an :class:`ExecutorError` (the control plane's report an error), though the
stop was recorded and its SIGTERM due. The SIGTERM is sent once Slurm runs the job again;
the SIGKILL comes after the grace either way.

A SIGTERM sent within about a second after ``scontrol resume`` was lost: the controller reports
the job RUNNING at once, but the node's ``slurmstepd`` resumes the step a moment later and
drops a signal that reaches it before (``scancel`` succeeds all the same), so the job was
SIGKILLed at the end of its grace without checkpointing. A job seen suspended gets its SIGTERM
only once it has been seen running again for ``RESUME_SETTLE`` seconds."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from slurm_fakes import NODE, Clock, Printed, fake_executor, started_run

from danlu.executors import Handle, RunState, StopReason
from danlu.executors.slurm_stops import RESUME_SETTLE
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


def terms(commands: Printed) -> list[list[str]]:
    """The SIGTERMs sent (``scancel --signal=TERM``), refused or not."""
    return [a for a in commands.cancels if "--signal=TERM" in a]


def test_a_suspended_run_s_stop_is_sent_once_it_runs_again(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    suspended = SuspendedJob(commands.printed)
    ex._commands = suspended
    suspended.squeue("SUSPENDED")
    ex.preempt(handle, 30.0)  # refused by Slurm: not raised, the SIGTERM is due
    assert [a for a in suspended.cancels if "--signal=TERM" in a] == []
    status = ex.poll(handle)
    assert status.state is RunState.RUNNING and status.stop_reason is StopReason.PREEMPT
    suspended.squeue("RUNNING")  # resumed within the grace: it gets its SIGTERM soon
    clock.now += 10
    assert ex.poll(handle).state is RunState.RUNNING
    clock.now += RESUME_SETTLE
    assert ex.poll(handle).state is RunState.RUNNING
    assert suspended.cancels[-1] == ["scancel", "--signal=TERM", "7"]
    ex.poll(handle)
    assert len(terms(suspended)) == 1  # once


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


def test_a_resumed_run_s_sigterm_waits_until_its_step_surely_runs(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    suspended = SuspendedJob(commands.printed)
    ex._commands = suspended
    suspended.squeue("SUSPENDED")
    ex.preempt(handle, 60.0)
    suspended.squeue("RUNNING")  # scontrol resume: the step may not run on its node yet
    clock.now += 1
    ex.poll(handle)  # first seen running again
    clock.now += RESUME_SETTLE - 0.5
    ex.poll(handle)
    assert terms(suspended) == []  # it could still be dropped by the node
    clock.now += 0.5
    ex.poll(handle)
    assert terms(suspended) == [["scancel", "--signal=TERM", "7"]]
    clock.now += 1
    ex.poll(handle)
    assert len(terms(suspended)) == 1


def test_a_run_suspended_again_before_its_sigterm_waits_again(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    suspended = SuspendedJob(commands.printed)
    ex._commands = suspended
    suspended.squeue("SUSPENDED")
    ex.preempt(handle, 60.0)
    suspended.squeue("RUNNING")
    ex.poll(handle)
    suspended.squeue("SUSPENDED")  # suspended again before the SIGTERM was sent
    clock.now += 1
    ex.poll(handle)
    suspended.squeue("RUNNING")
    clock.now += RESUME_SETTLE
    ex.poll(handle)  # first seen running since: counted from now
    assert terms(suspended) == []
    clock.now += RESUME_SETTLE
    ex.poll(handle)
    assert terms(suspended) == [["scancel", "--signal=TERM", "7"]]


def test_a_stop_just_after_a_resume_waits_for_the_step(tmp_path: Path) -> None:
    """The job was seen suspended at a poll before any stop, and is stopped right after
    Slurm resumed it: the SIGTERM waits as well, not sent by the preemption itself."""
    commands, clock, ex, handle = started_run(tmp_path)
    commands.squeue("SUSPENDED")
    ex.poll(handle)
    commands.squeue("RUNNING")
    clock.now += 5
    ex.preempt(handle, 60.0)
    assert terms(commands) == []
    clock.now += RESUME_SETTLE
    ex.poll(handle)
    assert terms(commands) == [["scancel", "--signal=TERM", "7"]]


def test_a_restarted_executor_keeps_waiting_for_a_resumed_step(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    suspended = SuspendedJob(commands.printed)
    ex._commands = suspended
    suspended.squeue("SUSPENDED")
    ex.preempt(handle, 60.0)
    suspended.squeue("RUNNING")
    ex.poll(handle)  # first seen running again, recorded
    restarted = fake_executor(suspended, tmp_path / "state", clock)
    clock.now += RESUME_SETTLE - 1
    restarted.poll(handle)
    assert terms(suspended) == []
    clock.now += 1
    restarted.poll(handle)
    assert terms(suspended) == [["scancel", "--signal=TERM", "7"]]


def test_a_run_never_suspended_gets_its_sigterm_at_once(tmp_path: Path) -> None:
    commands, _, ex, handle = started_run(tmp_path)
    ex.preempt(handle, 60.0)
    assert terms(commands) == [["scancel", "--signal=TERM", "7"]]


def test_a_gang_stop_just_after_a_resume_waits_for_the_steps(tmp_path: Path) -> None:
    """One node of a run Slurm has just resumed checkpointed alone: the executor's own stop
    of the other nodes waits for their steps to run again, as a stop danlu asked for does."""
    commands = Printed({"scontrol show node": NODE + "\n"})
    commands.squeue("RUNNING")
    clock = Clock()
    ex = fake_executor(commands, tmp_path / "state", clock)
    run_dir = tmp_path / "state" / "runs" / "gang-1"
    run_dir.mkdir(parents=True)
    now = clock.now
    record = {
        "job_id": "gang-1",
        "attempt": 0,
        "log_path": str(tmp_path / "gang-1.log"),
        "launched_at": now - 60,
        "slurm_id": 7,
        "nodes": ["n1", "n2"],
        "suspended_at": now - 5,
        "resumed_at": now - 1,  # first seen running again a second ago
    }
    (run_dir / "launch.json").write_text(json.dumps(record))
    (run_dir / "exit-n1.json").write_text(json.dumps({"exit_code": 75, "finished_at": now}))
    handle = Handle("gang-1", 0)
    assert ex.poll(handle).running
    assert terms(commands) == []
    assert "gang_stopped_at" in json.loads((run_dir / "launch.json").read_text())
    clock.now += RESUME_SETTLE - 1
    ex.poll(handle)
    assert terms(commands) == [["scancel", "--signal=TERM", "7"]]
