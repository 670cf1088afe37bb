"""A Slurm job Slurm itself ended (its time limit, a deadline, Slurm's own preemption) whose
nodes recorded no exit: Slurm records ``ExitCode=0:0`` for it (``TIMEOUT 0:0``, its batch
step ``CANCELLED 0:15``), which read as exit 0, a success. It was killed, as a ``CANCELLED``
one with ``0:0`` is: exit 137 (signal 9), a failure (no Slurm needed: printed output)."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_fakes import START, started_run

from danlu.executors import Outcome, RunState
from danlu.executors.slurm_exits import slurm_exit
from danlu.executors.slurmctl import job_from_fields, parse_fields

LATER = "2026-11-29T05:58:05"


@pytest.mark.parametrize("state", ["TIMEOUT", "DEADLINE", "PREEMPTED"])
def test_a_job_slurm_ended_without_an_exit_fails_as_killed(tmp_path: Path, state: str) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    commands.squeue(state, "TimeLimit")
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobName=danlu.held-1.0 JobState={state} Reason=TimeLimit ExitCode=0:0 "
        f"StartTime={START} EndTime={LATER}\n"
    )
    clock.now += 10
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    assert (status.outcome, status.exit_code, status.signal) == (Outcome.FAILED, 137, 9)
    assert status.message == f"Slurm job 7 ended {state} (TimeLimit)"


@pytest.mark.parametrize("state", ["TIMEOUT", "DEADLINE", "PREEMPTED", "CANCELLED"])
def test_slurms_zero_exit_of_a_stopped_job_is_a_sigkill(state: str) -> None:
    line = f"JobId=7 JobState={state} ExitCode=0:0 StartTime={START} EndTime={LATER}"
    assert slurm_exit(job_from_fields(parse_fields(line))) == (137, 9)


@pytest.mark.parametrize("state", ["TIMEOUT", "CANCELLED", "DEADLINE"])
def test_a_stopped_job_that_never_started_has_no_exit(state: str) -> None:
    """Slurm records a job it ended while pending with its StartTime as its EndTime."""
    line = f"JobId=7 JobState={state} ExitCode=0:0 StartTime={START} EndTime={START}"
    assert slurm_exit(job_from_fields(parse_fields(line))) == (None, None)


@pytest.mark.parametrize(
    ("state", "exit_field", "expected"),
    [
        ("COMPLETED", "0:0", (0, None)),
        ("TIMEOUT", "0:15", (143, 15)),
        ("TIMEOUT", "1:0", (1, None)),
        ("FAILED", "2:0", (2, None)),
        ("NODE_FAIL", "0:0", (None, None)),
        ("OUT_OF_MEMORY", "0:9", (137, 9)),
        ("OUT_OF_MEMORY", "3:0", (3, None)),
    ],
)
def test_recorded_exits_read_as_before(
    state: str, exit_field: str, expected: tuple[int | None, int | None]
) -> None:
    line = f"JobId=7 JobState={state} ExitCode={exit_field} StartTime={START} EndTime={LATER}"
    assert slurm_exit(job_from_fields(parse_fields(line))) == expected


@pytest.mark.parametrize("exit_field", ["0:125", "0:0"])
def test_a_job_killed_out_of_memory_is_a_sigkill(exit_field: str) -> None:
    """Slurm records ``OUT_OF_MEMORY 0:125`` for a job its cgroup's OOM killer ended: read as
    signal 125 (no Linux signal), exit 253. The kernel's kill is a SIGKILL."""
    line = f"JobId=7 JobState=OUT_OF_MEMORY ExitCode={exit_field} StartTime={START} EndTime={LATER}"
    assert slurm_exit(job_from_fields(parse_fields(line))) == (137, 9)
