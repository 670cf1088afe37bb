"""A Slurm run whose launch record is missing or damaged while Slurm still runs its job holds
the GPUs of the nodes Slurm gave that job (``NodeList``; while it waits, the nodes it asked
for), not every GPU of the partition: one such run on one node kept every other job from
launching anywhere until it ended."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import launch
from slurm_fakes import NODE, Clock, Printed, fake_executor

from danlu.executors import GpusBusyError, GpuSlot, Handle, supervise
from danlu.executors.slurm import SlurmExecutor

NODE2 = NODE.replace("NodeName=n1 NodeAddr=127.0.0.1", "NodeName=n2 NodeAddr=127.0.0.2")


def _damaged(tmp_path: Path, node_list: str) -> tuple[Printed, SlurmExecutor]:
    """Job held-1's run on GPU 0/0 (node n1), Slurm job 7, its launch record deleted; an
    executor started since (which reads the runs from their records), and Slurm reporting
    job 7 running with ``node_list`` as its ``NodeList`` and ``ReqNodeList``."""
    commands = Printed({"scontrol show node": f"{NODE}\n{NODE2}\n", "sbatch": "7\n"})
    commands.squeue("RUNNING")
    state = tmp_path / "state"
    ex = fake_executor(commands, state, Clock())
    handle = ex.submit(launch("held-1", "pass", gpus=(GpuSlot(0, 0),)))
    (ex._runs / handle.job_id / supervise.LAUNCH).unlink()
    commands.printed["squeue"] = "7|RUNNING|danlu.held-1.0\n"
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobName=danlu.held-1.0 JobState=RUNNING Reason=None "
        f"NodeList={node_list} ReqNodeList={node_list}\n"
    )
    commands.printed["scontrol show hostnames"] = "n1\n"
    commands.printed["sbatch"] = "8\n"
    return commands, fake_executor(commands, state, Clock())


def test_a_damaged_slurm_run_holds_the_gpus_of_its_jobs_nodes(tmp_path: Path) -> None:
    _commands, restarted = _damaged(tmp_path, "n1")
    for gpu in (0, 3):  # every GPU of n1: which of them it has is in its run directory
        with pytest.raises(GpusBusyError, match="held by job held-1"):
            restarted.submit(launch("other-1", "pass", gpus=(GpuSlot(0, gpu),)))
    assert restarted.submit(launch("other-2", "pass", gpus=(GpuSlot(1, 0),))) == Handle(
        "other-2", 0
    )


def test_a_damaged_slurm_run_of_no_known_nodes_holds_every_gpu(tmp_path: Path) -> None:
    _commands, restarted = _damaged(tmp_path, "(null)")
    with pytest.raises(GpusBusyError, match="held by job held-1"):
        restarted.submit(launch("other-2", "pass", gpus=(GpuSlot(1, 0),)))
