"""Fakes for the Slurm executor's tests that need no Slurm: :class:`Printed` commands that
print what a test gives them, a :class:`Clock` the test moves, and a run of job 7
(:func:`started_run`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from run_helpers import launch

from danlu.executors import ExecStatus, GpuSlot, Handle, Outcome, RunState
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands, SlurmError

START = "2026-11-29T04:58:05"
NODE = "NodeName=n1 NodeAddr=127.0.0.1 Gres=gpu:4 CPUTot=2 RealMemory=1024 State=IDLE"
LIMIT = 120.0


class Printed(SlurmCommands):
    """Slurm's commands, each printing ``printed[KEY]`` instead of running (KEY: the
    program, or ``scontrol show WHAT``); a :class:`SlurmError` there is raised instead.
    ``asked`` records every KEY asked but ``scancel``, whose argv ``cancels`` records (it
    prints nothing). ``scontrol show job`` prints nothing unless given (Slurm has forgotten
    the job: a stop's SIGTERM is sent without a look at when Slurm last resumed it)."""

    def __init__(self, printed: Mapping[str, str | SlurmError]) -> None:
        super().__init__({})
        self.printed = {"scontrol show job": "", **printed}
        self.asked: list[str] = []
        self.cancels: list[list[str]] = []

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> str:
        if argv[0] == "scancel":
            self.cancels.append(list(argv))
            return ""
        key = " ".join(argv[:3]) if argv[0] == "scontrol" else argv[0]
        self.asked.append(key)
        said = self.printed[key]
        if isinstance(said, SlurmError):
            raise said
        return said

    def squeue(self, state: str, reason: str = "None") -> None:
        """``squeue`` reports job 7 in ``state``."""
        self.printed["squeue"] = f"7|{state}|{START}|{reason}\n"


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def fake_executor(commands: Printed, state_dir: Path, clock: Clock) -> SlurmExecutor:
    """A Slurm executor on ``commands`` with a pending limit of :data:`LIMIT` seconds."""
    return SlurmExecutor(commands, state_dir, poll_interval=0.0, pending_limit=LIMIT, clock=clock)


def started_run(tmp_path: Path) -> tuple[Printed, Clock, SlurmExecutor, Handle]:
    """Slurm job 7, submitted and running."""
    commands = Printed({"scontrol show node": NODE + "\n", "sbatch": "7\n"})
    commands.squeue("RUNNING")
    clock = Clock()
    ex = fake_executor(commands, tmp_path / "state", clock)
    handle = ex.submit(launch("held-1", "pass", gpus=(GpuSlot(0, 0),)))
    assert ex.poll(handle).state is RunState.RUNNING
    return commands, clock, ex, handle


def cancelled_at_the_limit(
    ex: SlurmExecutor, handle: Handle, commands: Printed, clock: Clock
) -> None:
    """Poll the waiting run :data:`LIMIT` - 1 s on (not cancelled yet), then 1 s later
    (cancelled: ``scancel 7``)."""
    clock.now += LIMIT - 1
    ex.poll(handle)
    assert commands.cancels == []
    clock.now += 1
    ex.poll(handle)
    assert commands.cancels == [["scancel", "7"]]


def is_failed_launch(status: ExecStatus) -> bool:
    """Whether ``status`` is a failed launch: FAILED with no exit code, signal or start."""
    return (status.outcome, status.exit_code, status.signal, status.started_at) == (
        Outcome.FAILED,
        None,
        None,
        None,
    )
