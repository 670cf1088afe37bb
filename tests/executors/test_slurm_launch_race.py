"""Two launches of the same job into one state directory at the same time (two Slurm
executors on it: a control plane restarted while the old one still ran its pass): the
second found no run directory in its checks, then found the first's there when it made its
own. It took that for a failure of its own launch: it deleted the directory, with the
records of the first's run (its Slurm job id among them, so that no instance could find or
stop that Slurm job again), and reported a :class:`NodeLaunchError`."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from run_helpers import launch
from slurm_fakes import NODE, Clock, Printed, fake_executor

from danlu.core.cluster import Cluster
from danlu.executors import (
    JobAlreadyRunningError,
    JobLaunch,
    NodeLaunchError,
    RunState,
    supervise,
)
from danlu.executors.slurm import SlurmExecutor


def test_a_launch_that_finds_the_run_launched_meanwhile_leaves_it_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = Printed({"scontrol show node": NODE + "\n", "sbatch": "7\n"})
    commands.squeue("RUNNING")
    clock = Clock()
    first = fake_executor(commands, tmp_path / "state", clock)
    second = fake_executor(commands, tmp_path / "state", clock)
    checked = SlurmExecutor._clear_for
    launched = []

    def checked_then_raced(self: SlurmExecutor, job: JobLaunch, cluster: Cluster) -> Path:
        run_dir = checked(self, job, cluster)
        if self is second:  # the first executor launches it between the check and the mkdir
            launched.append(first.submit(launch("twice", "pass")))
        return run_dir

    monkeypatch.setattr(SlurmExecutor, "_clear_for", checked_then_raced)
    with pytest.raises(JobAlreadyRunningError, match="twice"):
        second.submit(launch("twice", "pass"))
    monkeypatch.undo()
    (handle,) = launched
    run_dir = tmp_path / "state" / "runs" / "twice"
    assert (run_dir / supervise.LAUNCH).is_file(), "the running run's records were deleted"
    assert (supervise.read_json(run_dir / supervise.LAUNCH) or {}).get("slurm_id") == 7
    assert commands.asked.count("sbatch") == 1  # the second submitted nothing
    assert first.poll(handle).state is RunState.RUNNING
    assert second.adopt() == [handle]


def test_a_launch_whose_log_cannot_be_opened_leaves_the_other_launchs_run_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second launch failed to open the job's log (out of file descriptors) after the
    first had submitted the job: the clean-up of its failure removed the run directory it
    had not made, the first's, with the Slurm job id no instance could then find again."""
    commands = Printed({"scontrol show node": NODE + "\n", "sbatch": "7\n"})
    commands.squeue("RUNNING")
    clock = Clock()
    first = fake_executor(commands, tmp_path / "state", clock)
    second = fake_executor(commands, tmp_path / "state", clock)
    opened = SlurmExecutor._open_log
    launched = []

    def raced_then_failed(self: SlurmExecutor, log_dir: Path, job_id: str) -> tuple[Path, int]:
        if self is not second:
            return opened(self, log_dir, job_id)
        launched.append(first.submit(launch("twice", "pass")))
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(SlurmExecutor, "_open_log", raced_then_failed)
    with pytest.raises(NodeLaunchError, match="twice"):
        second.submit(launch("twice", "pass"))
    monkeypatch.undo()
    (handle,) = launched
    run_dir = tmp_path / "state" / "runs" / "twice"
    assert (supervise.read_json(run_dir / supervise.LAUNCH) or {}).get("slurm_id") == 7, (
        "the running run's records were deleted"
    )
    assert first.poll(handle).state is RunState.RUNNING
