"""The Slurm task's exit record is written through no link the job planted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from danlu.executors import slurm_task

PY = sys.executable


def test_the_exit_record_is_not_written_through_a_link_the_job_planted(tmp_path: Path) -> None:
    """The task wrote its exit record through ``exit-.NODE.PID.json``, a name the job can
    foresee (the task is its parent): a symbolic link the job put there made the task write
    the record into the file it names (any file of the job's user, on the compute node)."""
    run_dir, victim = tmp_path / "run", tmp_path / "victim"
    run_dir.mkdir()
    victim.write_text("precious")
    plant = (
        "import os, sys\n"
        "run, victim = sys.argv[1], sys.argv[2]\n"
        "os.symlink(victim, os.path.join(run, f'exit-.n1.{os.getppid()}.json'))\n"
        "sys.exit(3)\n"
    )
    task = {"command": [PY, "-c", plant, str(run_dir), str(victim)], "env": {}}
    (run_dir / slurm_task.TASK).write_text(json.dumps(task))
    env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": "n1"}
    proc = subprocess.run(
        [PY, "-I", slurm_task.__file__, str(run_dir)], env=env, timeout=60, check=False
    )
    assert proc.returncode == 3
    assert victim.read_text() == "precious"
    record = json.loads(slurm_task.exit_path(run_dir, "n1").read_text())
    assert record["exit_code"] == 3
    assert not slurm_task.exit_path(run_dir, "n1").is_symlink()
