"""The ``slurm`` fixture: the test Slurm cluster of :mod:`slurm_cluster`, one per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from slurm_cluster import SlurmCluster, available, slurm_cluster


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The test cluster, for the tests of one module (skipped without Slurm)."""
    if not available():
        pytest.skip("Slurm is not installed (apt-get install -y slurm-wlm munge)")
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster
