"""A Slurm executor given a partition Slurm does not have: its error says so and names the
setting, against the real test cluster (:mod:`slurm_cluster`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster

from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands, SlurmError

# One Slurm cluster at a time: under pytest-xdist these modules share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def test_a_partition_slurm_does_not_have_is_named_as_such(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Before: ``partition 'gpus' has no nodes``, as if it existed; a typo is the likelier
    cause, and the setting to fix was not named."""
    with pytest.raises(SlurmError) as raised:
        SlurmExecutor(
            SlurmCommands(slurm.env),
            tmp_path / "state",
            partition="gpus",
            base_env={"PATH": slurm.env["PATH"]},
            api_url="http://127.0.0.1:8080",
            poll_interval=0.0,
        ).inventory()
    said = str(raised.value)
    assert "partition 'gpus' does not exist or has no nodes" in said, said
    assert "DANLU_SLURM_PARTITION" in said, said
