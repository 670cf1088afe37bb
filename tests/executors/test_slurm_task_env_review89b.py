"""The Slurm task's environment on its node: the node's own Slurm variables win
over those the task file carries. A control plane run inside a Slurm job has its node's
``SLURMD_NODENAME`` in its environment, the jobs' base environment, which the executor keeps
(it drops ``SLURM_*`` only): every node of every run took itself for that node."""

from __future__ import annotations

import json
from pathlib import Path

from run_helpers import launch
from slurm_fakes import NODE, Clock, Printed

from danlu.executors import GpuSlot, slurm_task
from danlu.executors.slurm import SlurmExecutor

TWO_NODES = NODE + "\n" + NODE.replace("n1", "n2").replace("127.0.0.1", "127.0.0.2") + "\n"


def test_the_nodes_own_name_wins_over_the_task_files() -> None:
    task = {
        "env": {"SLURMD_NODENAME": "login1", "MY_VAR": "kept"},
        "nodes": ["n2", "n1"],
        "devices": {"n2": "3", "n1": "0,1"},
    }
    env = slurm_task.task_env(task, {"SLURMD_NODENAME": "n1", "SLURM_NODEID": "0"})
    assert env["SLURMD_NODENAME"] == "n1"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["PET_NODE_RANK"] == "1"
    assert env["PET_NPROC_PER_NODE"] == "2"
    assert env["MY_VAR"] == "kept"


def test_a_control_plane_in_a_slurm_job_pins_each_node_to_its_own_gpus(tmp_path: Path) -> None:
    commands = Printed({"scontrol show node": TWO_NODES, "sbatch": "7\n"})
    commands.squeue("RUNNING")
    ex = SlurmExecutor(
        commands,
        tmp_path / "state",
        base_env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "login1", "SLURM_JOB_ID": "3"},
        poll_interval=0.0,
        clock=Clock(),
    )
    ex.submit(launch("two", "pass", gpus=(GpuSlot(0, 2), GpuSlot(1, 0), GpuSlot(1, 1))))
    task = json.loads((tmp_path / "state" / "runs" / "two" / slurm_task.TASK).read_text())
    assert "SLURM_JOB_ID" not in task["env"]
    on = {
        name: slurm_task.task_env(task, {"SLURMD_NODENAME": name, "SLURM_NODEID": str(i)})
        for i, name in enumerate(("n1", "n2"))
    }
    assert on["n1"]["CUDA_VISIBLE_DEVICES"] == "2"
    assert on["n2"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert (on["n1"]["PET_NODE_RANK"], on["n2"]["PET_NODE_RANK"]) == ("0", "1")
    assert on["n2"]["SLURMD_NODENAME"] == "n2"
