"""A stop's SIGTERM to a Slurm run whose job was resumed (``scontrol resume``) just before,
with no poll between to see it suspended: the controller reports the job running at once, but
the node's step resumes a moment later and drops a SIGTERM that reaches it before
(``scancel`` succeeds all the same), so the stop was lost and the job ran on to the SIGKILL
at the end of its grace. Before it sends a SIGTERM the executor asks Slurm when it last
resumed the job (``scontrol show job``: ``SuspendTime``) and, for a resume within
``RESUME_RECENT`` seconds that it has not waited for, sends it ``RESUME_SETTLE`` seconds
later, at a poll; a suspend or resume between that look and the ``scancel`` has it sent
again."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from slurm_fakes import NODE, Clock, Printed, fake_executor, started_run

from danlu.executors import Handle, RunState
from danlu.executors.slurm_stops import RESUME_SETTLE
from danlu.executors.slurmctl import job_from_fields, parse_fields


def shown(state: str, suspend_time: float | None) -> str:
    """``scontrol show job`` of job 7 in ``state``, last suspended or resumed at
    ``suspend_time`` (None: never)."""
    when = "None" if suspend_time is None else stamp(suspend_time)
    return f"JobId=7 JobName=danlu.held-1.0 JobState={state} SuspendTime={when}\n"


def stamp(when: float) -> str:
    """``when`` as Slurm prints a time (local time, to the second)."""
    return datetime.fromtimestamp(when).strftime("%Y-%m-%dT%H:%M:%S")


def terms(commands: Printed) -> list[list[str]]:
    """The SIGTERMs sent (``scancel --signal=TERM``)."""
    return [a for a in commands.cancels if "--signal=TERM" in a]


def launch_record(tmp_path: Path) -> dict[str, object]:
    return dict(json.loads((tmp_path / "state/runs/held-1/launch.json").read_text()))


def test_the_suspend_time_is_read_from_scontrol() -> None:
    job = job_from_fields(parse_fields(shown("RUNNING", 1_800_000_000.0)))
    assert job.suspend_time == 1_800_000_000.0
    assert job_from_fields(parse_fields(shown("RUNNING", None))).suspend_time is None


def test_a_stop_just_after_an_unseen_resume_waits_for_the_step(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)  # never seen suspended
    commands.printed["scontrol show job"] = shown("RUNNING", clock.now - 1)
    ex.preempt(handle, 60.0)
    assert terms(commands) == []  # the step may not run yet, and would drop it
    assert launch_record(tmp_path)["term_due"] is not None
    clock.now += RESUME_SETTLE - 0.5
    ex.poll(handle)
    assert terms(commands) == []
    clock.now += 0.5
    assert ex.poll(handle).state is RunState.RUNNING
    assert terms(commands) == [["scancel", "--signal=TERM", "7"]]
    clock.now += 1
    ex.poll(handle)
    assert len(terms(commands)) == 1  # once
    assert "term_due" not in launch_record(tmp_path)


def test_a_stop_long_after_a_resume_is_sent_at_once(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    # resumed a minute ago, past RESUME_RECENT: the step surely runs
    commands.printed["scontrol show job"] = shown("RUNNING", clock.now - 60)
    ex.preempt(handle, 60.0)
    assert terms(commands) == [["scancel", "--signal=TERM", "7"]]


def test_a_resume_on_a_clock_ahead_of_danlus_is_waited_for_once(tmp_path: Path) -> None:
    """The controller's clock runs ahead: its resume time is still to come on danlu's. The
    SIGTERM waits ``RESUME_SETTLE`` seconds from when danlu saw the resume, not until its
    own clock passes Slurm's time."""
    commands, clock, ex, handle = started_run(tmp_path)
    commands.printed["scontrol show job"] = shown("RUNNING", clock.now + 20)
    ex.preempt(handle, 60.0)
    assert terms(commands) == []
    clock.now += RESUME_SETTLE
    ex.poll(handle)
    assert terms(commands) == [["scancel", "--signal=TERM", "7"]]


def test_a_restarted_executor_keeps_waiting_for_an_unseen_resume(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    commands.printed["scontrol show job"] = shown("RUNNING", clock.now)
    ex.preempt(handle, 60.0)
    restarted = fake_executor(commands, tmp_path / "state", clock)
    clock.now += RESUME_SETTLE - 1
    restarted.poll(handle)
    assert terms(commands) == []
    clock.now += 1
    restarted.poll(handle)
    assert terms(commands) == [["scancel", "--signal=TERM", "7"]]


def test_a_job_scontrol_finds_suspended_gets_its_sigterm_once_resumed(tmp_path: Path) -> None:
    """``squeue`` (read up to a poll interval before) said RUNNING, ``scontrol`` now says
    SUSPENDED: the SIGTERM, which Slurm would refuse, waits for the resume and the step."""
    commands, clock, ex, handle = started_run(tmp_path)
    commands.printed["scontrol show job"] = shown("SUSPENDED", clock.now)
    ex.preempt(handle, 60.0)
    assert terms(commands) == []
    commands.squeue("SUSPENDED")
    clock.now += 5
    ex.poll(handle)
    commands.squeue("RUNNING")
    commands.printed["scontrol show job"] = shown("RUNNING", clock.now)
    clock.now += 1
    ex.poll(handle)  # first seen running again
    assert terms(commands) == []
    clock.now += RESUME_SETTLE
    ex.poll(handle)
    assert terms(commands) == [["scancel", "--signal=TERM", "7"]]


class SuspendedAtTheCancel(Printed):
    """Slurm's commands of job 7, which an admin suspends and resumes just as its SIGTERM
    is sent: ``scontrol show job`` reports a new ``SuspendTime`` after the first
    ``scancel --signal=TERM``."""

    def __init__(self, printed: Printed, clock: Clock) -> None:
        super().__init__(printed.printed)
        self.clock = clock

    def run(self, argv: Sequence[str], **kwargs: object) -> str:
        out = super().run(argv, **kwargs)  # type: ignore[arg-type]
        if "--signal=TERM" in argv and len(terms(self)) == 1:
            self.printed["scontrol show job"] = shown("RUNNING", self.clock.now)
        return out


def test_a_sigterm_crossed_by_a_resume_is_sent_again_once_the_step_runs(
    tmp_path: Path,
) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    commands.printed["scontrol show job"] = shown("RUNNING", None)
    racing = SuspendedAtTheCancel(commands, clock)
    ex._commands = racing
    ex.preempt(handle, 60.0)
    assert len(terms(racing)) == 1  # perhaps dropped by the step, suspended meanwhile
    assert "term_due" in launch_record(tmp_path)
    clock.now += 1
    ex.poll(handle)
    assert len(terms(racing)) == 1
    clock.now += RESUME_SETTLE
    ex.poll(handle)
    assert len(terms(racing)) == 2
    assert "term_due" not in launch_record(tmp_path)
    clock.now += 1
    ex.poll(handle)
    assert len(terms(racing)) == 2


def test_a_gang_stop_just_after_an_unseen_resume_waits_for_the_steps(tmp_path: Path) -> None:
    commands = Printed({"scontrol show node": NODE + "\n"})
    commands.squeue("RUNNING")
    clock = Clock()
    commands.printed["scontrol show job"] = shown("RUNNING", clock.now - 1)
    ex = fake_executor(commands, tmp_path / "state", clock)
    run_dir = tmp_path / "state" / "runs" / "gang-1"
    run_dir.mkdir(parents=True)
    record = {
        "job_id": "gang-1",
        "attempt": 0,
        "log_path": str(tmp_path / "gang-1.log"),
        "launched_at": clock.now - 60,
        "slurm_id": 7,
        "nodes": ["n1", "n2"],
    }
    (run_dir / "launch.json").write_text(json.dumps(record))
    (run_dir / "exit-n1.json").write_text(json.dumps({"exit_code": 75, "finished_at": clock.now}))
    handle = Handle("gang-1", 0)
    assert ex.poll(handle).running
    assert terms(commands) == []
    assert "gang_stopped_at" in json.loads((run_dir / "launch.json").read_text())
    clock.now += RESUME_SETTLE
    ex.poll(handle)
    assert terms(commands) == [["scancel", "--signal=TERM", "7"]]


def test_a_resume_a_poll_saw_is_waited_for_once(tmp_path: Path) -> None:
    """Seen suspended and then running at the polls, the job's SIGTERM waits
    ``RESUME_SETTLE`` seconds from then, and not again for the same resume that Slurm
    reports (``SuspendTime``) when it is sent."""
    commands, clock, ex, handle = started_run(tmp_path)
    commands.squeue("SUSPENDED")
    commands.printed["scontrol show job"] = shown("SUSPENDED", clock.now)
    ex.preempt(handle, 60.0)
    clock.now += 5
    commands.squeue("RUNNING")
    commands.printed["scontrol show job"] = shown("RUNNING", clock.now)  # resumed now
    ex.poll(handle)  # first seen running again
    assert terms(commands) == []
    clock.now += RESUME_SETTLE
    ex.poll(handle)
    assert terms(commands) == [["scancel", "--signal=TERM", "7"]]
