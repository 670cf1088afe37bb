"""Two launches of the same job into one state directory at the same time (two Slurm
executors on it: a control plane restarted while the old one still ran its pass): the
second found no run directory in its checks, then found the first's there when it made its
own. It took that for a failure of its own launch: it deleted the directory, with the
records of the first's run (its Slurm job id among them, so that no instance could find or
stop that Slurm job again), and reported a :class:`NodeLaunchError`."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import launch
from slurm_fakes import NODE, Clock, Printed, fake_executor

from danlu.core.cluster import Cluster
from danlu.executors import JobAlreadyRunningError, JobLaunch, RunState, supervise
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
