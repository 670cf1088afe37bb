"""On the test Slurm cluster: partition ``gpu`` drained (``scontrol update PartitionName=gpu
State=DRAIN``, as before a maintenance) closes both nodes and Slurm's refusal of a run's
``sbatch`` is no fault of the job's (a :class:`NodeLaunchError` of no node: re-queued without
a restart counted; every job placed there failed after its restarts); ``DOWN`` closes them
too (Slurm would take the run and start it never); ``UP`` opens them again."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import launch
from slurm_cluster import SlurmCluster, executor_on

from danlu.executors import GpuSlot, NodeLaunchError

# One Slurm cluster at a time: under pytest-xdist these modules share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def test_a_partition_drained_or_down_in_slurm_closes_its_nodes_and_refuses_no_job(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    ex = executor_on(slurm, tmp_path / "state")
    assert ex.closed_nodes() == {}
    try:
        slurm.run("scontrol", "update", "PartitionName=gpu", "State=DRAIN")
        ex.refresh_inventory()
        closed = ex.closed_nodes()
        assert sorted(closed) == ["n1", "n2"], closed
        assert closed["n1"].startswith("Slurm reports partition gpu DRAIN: "), closed
        with pytest.raises(NodeLaunchError) as refused:
            ex.submit(launch("drained-1", "pass", gpus=(GpuSlot(0, 0),)))
        assert refused.value.nodes == ()
        assert "Required partition not available" in str(refused.value)
        assert str(refused.value).startswith(  # the partition and the state Slurm reports
            "Slurm reports partition gpu DRAIN: it takes no job until scontrol update "
            "PartitionName=gpu State=UP"
        ), refused.value
        slurm.run("scontrol", "update", "PartitionName=gpu", "State=DOWN")
        ex.refresh_inventory()
        assert sorted(ex.closed_nodes()) == ["n1", "n2"]
    finally:
        slurm.run("scontrol", "update", "PartitionName=gpu", "State=UP")
    ex.refresh_inventory()
    assert ex.closed_nodes() == {}
