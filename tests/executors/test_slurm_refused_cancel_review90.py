"""A ``scancel`` that Slurm refuses (permission denied; not an unreachable controller) no
longer fails every poll of the run with :class:`ExecutorError`: the run reads as
running, its message says Slurm refused to stop it, and the stop is asked again at the next
poll; an unreachable controller is still raised as before."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from run_helpers import launch
from slurm_fakes import LIMIT, Clock, Printed, fake_executor, started_run

from danlu.executors import ExecutorUnavailableError, RunState
from danlu.executors.slurmctl import SlurmError, SlurmUnavailableError

DENIED = "scancel: error: Kill job error on job id 7: Access/permission denied"


class Refusing(Printed):
    """:class:`Printed` whose ``scancel`` fails with ``error`` (recorded all the same)."""

    error: SlurmError | None = None

    def run(self, argv: Sequence[str], **kwargs: object) -> str:
        out = super().run(argv, **kwargs)  # type: ignore[arg-type]
        if argv[0] == "scancel" and self.error is not None:
            raise self.error
        return out


def test_a_refused_kill_leaves_the_run_running_and_asks_again(tmp_path: Path) -> None:
    commands, clock, ex, handle = started_run(tmp_path)
    refusing = Refusing(commands.printed)
    ex._commands = refusing
    ex.cancel(handle)  # the SIGTERM goes through
    refusing.error = SlurmError(DENIED)
    clock.now += 60  # past the cancel grace: a SIGKILL is due
    for _ in range(2):
        status = ex.poll(handle)
        assert status.state is RunState.RUNNING
        assert "refused to stop" in status.message and "permission denied" in status.message
    kills = [argv for argv in refusing.cancels if "--signal=KILL" in argv]
    assert len(kills) == 2  # asked again at each poll
    refusing.error = SlurmUnavailableError("scancel: error: Unable to contact slurm controller")
    with pytest.raises(ExecutorUnavailableError):
        ex.poll(handle)


def test_a_refused_cancel_of_a_run_pending_too_long_is_noted(tmp_path: Path) -> None:
    commands = Refusing(
        {"scontrol show node": "NodeName=n1 Gres=gpu:4 State=IDLE\n", "sbatch": "7\n"}
    )
    commands.squeue("PENDING", "Resources")
    clock = Clock()
    ex = fake_executor(commands, tmp_path / "state", clock)
    handle = ex.submit(launch("pend-1", "pass"))
    assert ex.poll(handle).state is RunState.RUNNING
    commands.error = SlurmError(DENIED)
    clock.now += LIMIT + 1
    status = ex.poll(handle)
    assert status.state is RunState.RUNNING
    assert "refused to stop" in status.message
    assert commands.cancels[-1] == ["scancel", "7"]
