"""``danlu server --executor ray`` (a real process) joining the test Ray cluster: the nodes
come from Ray, a job spanning both nodes is preempted by a higher-priority one, checkpoints on
each node and resumes from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_plane import (
    control_plane,
    mixed_workload,
    preempt_and_resume,
    server_env,
    survives_a_crash,
)
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


def test_a_mixed_workload_ends(cluster: Any, tmp_path: Path) -> None:
    """Seeded jobs of 1-8 GPUs and memory shares, with priorities and cancellations: every
    job not cancelled succeeds, none restarted after a failure."""
    record = tmp_path / "record"
    record.mkdir()
    args = ["--executor", "ray", "--ray-address", cluster.address]
    with control_plane(tmp_path, args, server_env({})) as client:
        jobs = mixed_workload(client, record, seed=4, count=12)
    assert {j["state"] for j in jobs} <= {"SUCCEEDED", "CANCELLED"}, jobs
    assert sum(j["state"] == "SUCCEEDED" for j in jobs) >= 8
    assert all(j["restarts"] == 0 for j in jobs)


def test_runs_outlive_a_crashed_control_plane(cluster: Any, tmp_path: Path) -> None:
    args = ["--executor", "ray", "--ray-address", cluster.address]
    env = server_env({})
    survives_a_crash(tmp_path, args, env)
