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


def test_the_node_rank_follows_the_runs_node_order() -> None:
    """``PET_MASTER_ADDR`` is the run's first node; the rank was Slurm's node id, whose
    order is Slurm's (n1 before n2), so rank 0 was not where the master address pointed."""
    task = {"nodes": ["n2", "n1"], "devices": {"n2": "0", "n1": "1,2"}, "master_addr": "10.0.0.2"}
    first = slurm_task.task_env(task, {"SLURMD_NODENAME": "n2", "SLURM_NODEID": "1"})
    second = slurm_task.task_env(task, {"SLURMD_NODENAME": "n1", "SLURM_NODEID": "0"})
    assert (first["PET_NODE_RANK"], second["PET_NODE_RANK"]) == ("0", "1")
    assert first["PET_MASTER_ADDR"] == second["PET_MASTER_ADDR"] == "10.0.0.2"
    assert second["CUDA_VISIBLE_DEVICES"] == "1,2" and second["PET_NPROC_PER_NODE"] == "2"


def test_a_checkpoint_is_no_failure_for_srun(tmp_path: Path) -> None:
    """``srun --kill-on-bad-exit`` kills the other nodes when a task exits non-zero: a
    node that checkpointed (exit 75) got the others, still writing their checkpoints, killed
    after Slurm's KillWait. The task exits 0 then, whether its stop came through the step's
    signal (a stop of danlu's) or not (a ``kill`` of the command alone: the executor stops the
    other nodes with the job's grace when it reads the record, which keeps the 75). A task
    alone has no other nodes to spare and keeps its 75 for Slurm: the executor reads no
    record of a run without GPUs, whose node Slurm picks."""
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(75))\n"
        "print('ready', flush=True)\n"
        "if sys.argv[1] == 'stop': time.sleep(60)\n"
        "sys.exit(75)\n"
    )
    gang, alone = ["n1", "n2"], []  # a run without GPUs names no node: Slurm picks one
    for how, nodes, status in (("stop", gang, 0), ("self", gang, 0), ("self", alone, 75)):
        run_dir = tmp_path / f"{how}-{len(nodes)}"
        run_dir.mkdir()
        task = {
            "command": [PY, "-c", code, how],
            "env": {"PATH": os.environ["PATH"]},
            "nodes": nodes,
        }
        (run_dir / slurm_task.TASK).write_text(json.dumps(task))
        env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": "n1"}
        proc = subprocess.Popen(
            [PY, "-I", slurm_task.__file__, str(run_dir)],
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
            if how == "stop":
                os.killpg(proc.pid, signal.SIGTERM)  # as Slurm signals the step
            assert proc.wait(timeout=30) == status
            record = json.loads(slurm_task.exit_path(run_dir, "n1").read_text())
            assert record["exit_code"] == 75
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
