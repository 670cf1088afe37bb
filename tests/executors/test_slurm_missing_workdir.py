"""A Slurm job whose ``workdir`` it cannot enter on its node fails at once, naming it.

``slurmd`` runs a batch job whose ``--chdir`` it cannot enter in ``/tmp`` instead (it only logs
``couldn't chdir ... going to /tmp instead``): the batch script enters the workdir itself and
exits 127 when it cannot, and the per-node task (on the other nodes) says it cannot enter the
workdir, not that the job's program is missing. Against the real test cluster
(:mod:`slurm_cluster`) and the task alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import launch, wait
from slurm_cluster import SlurmCluster

from danlu.executors import GpuSlot, Outcome
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands

SRC = str(Path(__file__).resolve().parents[2] / "src")

# One Slurm cluster at a time: under pytest-xdist these modules share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


@pytest.fixture
def ex(slurm: SlurmCluster, tmp_path: Path) -> SlurmExecutor:
    return SlurmExecutor(
        SlurmCommands(slurm.env),
        tmp_path / "state",
        partition="gpu",
        base_env={"PATH": slurm.env["PATH"], "PYTHONPATH": SRC},
        api_url="http://127.0.0.1:8080",
        cancel_grace=1.0,
        poll_interval=0.0,
    )


@pytest.mark.parametrize("kind", ["missing", "a-file"])
def test_a_job_whose_workdir_cannot_be_entered_fails_naming_it(
    ex: SlurmExecutor, tmp_path: Path, kind: str
) -> None:
    """Before: the job failed with exit 127 and ``cannot start '/usr/bin/python3' on n1: No
    such file or directory``, as if the program were missing (its batch script ran in
    ``/tmp``)."""
    workdir = tmp_path / "it's %s here"
    if kind == "a-file":
        workdir.write_text("not a directory")
    ran = tmp_path / "ran"
    code = f"import pathlib, os; pathlib.Path({str(ran)!r}).write_text(os.getcwd())"
    handle = ex.submit(launch("wd-gone", code, gpus=(GpuSlot(0, 1),), workdir=str(workdir)))
    status = wait(ex, handle)
    log = ex.logs(handle)[0].decode()
    assert status.outcome is Outcome.FAILED, log
    assert status.exit_code == 127, log
    assert not ran.exists(), f"the job ran in {ran.read_text()}"
    assert f"danlu: cannot enter the workdir '{workdir}' on n1" in log, log


def _run_task(
    run_dir: Path, command: list[str], workdir: Path, node: str
) -> subprocess.CompletedProcess[bytes]:
    """The per-node task alone on ``run_dir`` (its task file written there), as ``srun``
    starts it on ``node``."""
    task = {"command": command, "env": {}, "workdir": str(workdir)}
    (run_dir / "task.json").write_text(json.dumps(task))
    script = str(Path(SRC) / "danlu" / "executors" / "slurm_task.py")
    env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": node}
    return subprocess.run(
        [sys.executable, "-I", script, str(run_dir)], env=env, capture_output=True, timeout=60
    )


@pytest.mark.parametrize("kind", ["missing", "a-file"])
def test_the_task_says_it_cannot_enter_the_workdir(tmp_path: Path, kind: str) -> None:
    """The task alone, as ``srun`` starts it on a node without the directory: before, it said
    the job's program could not be started."""
    workdir = tmp_path / "gone"
    if kind == "a-file":
        workdir.write_text("not a directory")
    done = _run_task(tmp_path, [sys.executable, "-c", "pass"], workdir, "n2")
    assert done.returncode == 127
    said = done.stderr.decode()
    assert f"danlu: cannot enter the workdir {str(workdir)!r} on n2" in said, said
    assert "cannot start" not in said, said
    assert json.loads((tmp_path / "exit-n2.json").read_text())["exit_code"] == 127


def test_the_task_still_says_a_missing_program_is_missing(tmp_path: Path) -> None:
    """A program that does not exist, run in a workdir that does: the error is the program's."""
    done = _run_task(tmp_path, [str(tmp_path / "no-such-program")], tmp_path, "n1")
    assert done.returncode == 127
    said = done.stderr.decode()
    assert f"cannot start {str(tmp_path / 'no-such-program')!r} on n1" in said, said
    assert "workdir" not in said, said
