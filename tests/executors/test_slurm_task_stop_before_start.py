"""The Slurm executor's per-node task without Slurm: a stop recorded in the run directory
before the task started its command (``stop.json``, written by the executor before it sent
the stop's SIGTERM) is sent to the command once started. Slurm signals only the processes of
the steps running then, so a SIGTERM sent while the node ran the job's ``Prolog`` (which
Slurm reports ``RUNNING``) or launched its step reached none of the command's, and the
command ran on to the SIGKILL at the end of the stop's grace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from danlu.executors import slurm_task

PY = sys.executable

SLEEPS = ["/bin/sh", "-c", "trap 'kill $!; exit 75' TERM; sleep 60 & wait"]
"""A command that checkpoints (exit 75) on SIGTERM, else runs a minute. Its trap ends the
``sleep`` too: after a stop the task waits for the rest of the command's process group."""


def run_task(run_dir: Path, command: list[str], timeout: float = 30) -> int:
    """Run the task on ``run_dir`` as ``srun`` starts it; its exit status."""
    task = {"command": command, "env": {"PATH": os.environ["PATH"]}}
    (run_dir / slurm_task.TASK).write_text(json.dumps(task))
    env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": "n1"}
    proc = subprocess.Popen(
        [PY, "-I", slurm_task.__file__, str(run_dir)], env=env, start_new_session=True
    )
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def recorded_exit(run_dir: Path) -> int:
    return int(json.loads(slurm_task.exit_path(run_dir, "n1").read_text())["exit_code"])


def test_a_stop_recorded_before_the_command_started_reaches_it(tmp_path: Path) -> None:
    (tmp_path / "stop.json").write_text(json.dumps({"reason": "preempt", "grace": 600.0}))
    # without the stop the command runs its minute and exits 0; the bound is above that (a
    # loaded host starts the task slowly), and the exit recorded tells the two apart
    run_task(tmp_path, SLEEPS, timeout=120)
    # 75 once the shell's trap is set, 143 when the SIGTERM came before
    assert recorded_exit(tmp_path) in (75, 128 + signal.SIGTERM)


@pytest.mark.parametrize("stop", [None, "{}", "not json"])
def test_no_stop_recorded_leaves_the_command_alone(tmp_path: Path, stop: str | None) -> None:
    if stop is not None:
        (tmp_path / "stop.json").write_text(stop)
    assert run_task(tmp_path, ["/bin/sh", "-c", "sleep 0.5; exit 3"]) == 3
    assert recorded_exit(tmp_path) == 3


def test_stop_asked_reads_the_run_s_stop_record(tmp_path: Path) -> None:
    assert not slurm_task.stop_asked(tmp_path)
    (tmp_path / "stop.json").write_text(json.dumps({"reason": "cancel", "grace": 5.0}))
    assert slurm_task.stop_asked(tmp_path)
