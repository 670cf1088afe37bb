"""``danlu server --executor ray`` (a real process) joining the test Ray cluster: the nodes
come from Ray, a job spanning both nodes is preempted by a higher-priority one, checkpoints on
each node and resumes from it; a node that joins is scheduled onto and one that leaves has
its jobs re-queued."""

from __future__ import annotations

import sys
import time
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
    wait_state,
)
from ray_cluster import ray_cluster

# One Ray cluster at a time: under pytest-xdist these modules share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


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


def test_a_node_that_joins_takes_the_queue_and_its_jobs_are_requeued_when_it_leaves(
    cluster: Any, tmp_path: Path
) -> None:
    """With ``DANLU_INVENTORY_REFRESH=1``: a job waiting for GPUs on a full cluster starts on
    a node that joins; when that node leaves, the job is re-queued and the node is gone from
    the inventory."""
    args = ["--executor", "ray", "--ray-address", cluster.address]
    env = server_env({"DANLU_INVENTORY_REFRESH": "1"})
    hold = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(300)"]
    with control_plane(tmp_path, args, env) as client:
        wide = client.submit({"name": "wide", "command": hold, "resources": {"gpus": 8}})
        wait_state(client, wide["id"], "RUNNING")
        late = client.submit({"name": "late", "command": hold, "resources": {"gpus": 2}})
        time.sleep(2)
        assert client.get_job(late["id"])["state"] == "PENDING"
        joined = cluster.add_node(num_cpus=1, num_gpus=2, labels={"danlu.node": "n3"})
        try:
            running = wait_state(client, late["id"], "RUNNING", timeout=60)
            assert {s["node"] for s in running["allocation"]} == {"n3"}
            assert "n3" in [n["name"] for n in client.nodes()]
        finally:
            cluster.remove_node(joined)
        requeued = wait_state(client, late["id"], "PENDING", timeout=60)
        assert requeued["restarts"] == 0 and requeued["preemptions"] == 1, [
            (e["new"], e["reason"]) for e in client.events(late["id"])
        ]
        deadline = time.monotonic() + 60
        while "n3" in [n["name"] for n in client.nodes()]:
            assert time.monotonic() < deadline, client.nodes()
            time.sleep(0.5)
        assert client.get_job(wide["id"])["state"] == "RUNNING"
        for job in (late, wide):
            client.cancel(job["id"])
        wait_state(client, wide["id"], "CANCELLED")
