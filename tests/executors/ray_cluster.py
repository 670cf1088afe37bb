"""A real Ray cluster for the tests (``ray.cluster_utils.Cluster``): a head without GPUs and
two nodes, ``n1`` and ``n2`` (their ``danlu.node`` labels), of 4 GPUs each, on this host.

Without Ray (the ``ray`` extra) the tests are skipped, or fail when ``DANLU_TEST_REQUIRE_RAY``
is set (CI installs it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

NODES = ("n1", "n2")
GPUS_PER_NODE = 4


@contextmanager
def ray_cluster(connect: bool = True) -> Iterator[Any]:
    """Start the cluster (and join it from this process when ``connect``); stop it after."""
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        if os.environ.get("DANLU_TEST_REQUIRE_RAY"):
            pytest.fail("Ray is required: pip install -e '.[ray]'")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    try:
        for name in NODES:
            cluster.add_node(num_cpus=1, num_gpus=GPUS_PER_NODE, labels={"danlu.node": name})
        cluster.wait_for_nodes()
        if connect:
            ray.init(address=cluster.address, namespace="danlu-test", log_to_driver=False)
        yield cluster
    finally:
        if connect:
            ray.shutdown()
        cluster.shutdown()
