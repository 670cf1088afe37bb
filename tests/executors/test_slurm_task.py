"""The Slurm executor's per-node task without Slurm: started as ``srun`` starts it (a
process group of its own) and signalled as Slurm signals a step (SIGTERM to all its
processes), it waits for the job's processes, not only for the command it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from run_helpers import SHELL_CHECKPOINT

from danlu.executors import slurm_task
from danlu.executors.supervise import proc_start_time

PY = sys.executable


def test_the_task_outlasts_a_shell_wrapper_while_its_program_checkpoints(tmp_path: Path) -> None:
    """``shell: true``: the step's SIGTERM kills ``/bin/sh`` at once. The task exited with
    it, and Slurm then killed what was left of the step: the program the shell started, in
    the middle of its checkpoint."""
    script, pid_file, saved = tmp_path / "train.py", tmp_path / "pid", tmp_path / "saved"
    script.write_text(SHELL_CHECKPOINT)
    line = f"cd {tmp_path} && {PY} train.py {pid_file} {saved} 1.0; echo after"
    task = {"command": ["/bin/sh", "-c", line], "env": {"PATH": os.environ["PATH"]}}
    (tmp_path / slurm_task.TASK).write_text(json.dumps(task))
    env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": "n1"}
    proc = subprocess.Popen(
        [PY, "-I", slurm_task.__file__, str(tmp_path)], env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 15
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the program never started"
            time.sleep(0.05)
        program = int(pid_file.read_text())
        os.killpg(proc.pid, signal.SIGTERM)  # as Slurm signals every process of the step
        assert proc.wait(timeout=60) == 128 + 15  # the shell's status
        assert saved.exists(), "the task exited while the program was still checkpointing"
        assert proc_start_time(program) is None
        record = json.loads(slurm_task.exit_path(tmp_path, "n1").read_text())
        assert record["exit_code"] == 128 + 15
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
