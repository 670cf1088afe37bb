"""``danlu server --executor ray`` (a real process) joining the test Ray cluster: the nodes
come from Ray, a job spanning both nodes is preempted by a higher-priority one, checkpoints on
each node and resumes from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_plane import control_plane, preempt_and_resume, server_env
from ray_cluster import ray_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with ray_cluster(connect=False) as started:
        yield started


def test_a_two_node_job_is_preempted_checkpoints_and_resumes(cluster: Any, tmp_path: Path) -> None:
    args = ["--executor", "ray", "--ray-address", cluster.address]
    with control_plane(tmp_path, args, server_env({})) as client:
        preempt_and_resume(client)
