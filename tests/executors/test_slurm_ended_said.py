"""A run Slurm ended by itself (its time limit, a node lost) names Slurm's state and Slurm's
reason for it in its message, and the run's reason, which the job's event and ``danlu show``
give, keeps that message: a ``danlu.train`` job hit by Slurm's ``TIMEOUT`` checkpoints and
exits 75 as at any SIGTERM, and its event said only "checkpointed and exited 75 on its own (a
SIGTERM from outside)". No Slurm needed: printed output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurm_fakes import START, started_run

from danlu.executors import ExecStatus, Outcome, RunState, slurm_task
from danlu.server.run_exits import describe_exit

LATER = "2026-11-29T05:58:05"


def _ended(tmp_path: Path, state: str, reason: str, recorded: int | None) -> ExecStatus:
    """The status of Slurm job 7 (one node, ``n1``) that Slurm reports ended in ``state``
    for ``reason``, after its task recorded the exit ``recorded`` (None: none)."""
    commands, clock, ex, handle = started_run(tmp_path)
    if recorded is not None:
        path = slurm_task.exit_path(tmp_path / "state" / "runs" / "held-1", "n1")
        path.write_text(json.dumps({"exit_code": recorded, "finished_at": clock.now + 1}))
    commands.squeue(state, reason)
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobName=danlu.held-1.0 JobState={state} Reason={reason} "
        f"ExitCode={recorded or 0}:0 StartTime={START} EndTime={LATER}\n"
    )
    clock.now += 10
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    return status


@pytest.mark.parametrize(
    ("state", "reason", "said"),
    [
        ("TIMEOUT", "TimeLimit", "Slurm job 7 ended TIMEOUT (TimeLimit)"),
        (
            "NODE_FAIL",
            "NodeDown",
            "Slurm job 7 ended NODE_FAIL (NodeDown) after every node recorded its exit",
        ),
    ],
)
def test_a_checkpoint_at_slurms_own_stop_names_slurms_state_and_reason(
    tmp_path: Path, state: str, reason: str, said: str
) -> None:
    status = _ended(tmp_path, state, reason, 75)
    assert (status.outcome, status.checkpointed, status.stop_reason) == (
        Outcome.PREEMPTED,
        True,
        None,
    )
    assert status.message == said
    succeeded, code, why = describe_exit(status)
    assert (succeeded, code) == (False, 75)
    assert why.startswith("checkpointed and exited 75 on its own (a SIGTERM from outside)")
    assert why.endswith(f"; {said}")


def test_a_run_lost_with_its_node_names_slurms_state_and_reason(tmp_path: Path) -> None:
    status = _ended(tmp_path, "NODE_FAIL", "NodeDown", None)
    assert status.node_lost
    assert status.message == "a node of Slurm job 7 failed: it ended NODE_FAIL (NodeDown)"
    assert "NODE_FAIL (NodeDown)" in describe_exit(status)[2]


def test_slurms_empty_reason_is_left_out(tmp_path: Path) -> None:
    status = _ended(tmp_path, "TIMEOUT", "None", 75)
    assert status.message == "Slurm job 7 ended TIMEOUT"
