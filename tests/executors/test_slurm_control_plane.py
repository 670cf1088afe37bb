"""``danlu server --executor slurm`` (a real process) on the test Slurm cluster: the nodes come
from Slurm, a job spanning both nodes is preempted by a higher-priority one, checkpoints on
each node and resumes from it; a node taken out of the partition has its job resume on
another; the CLI refuses a fake inventory with Slurm."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from control_plane import (
    CLI,
    control_plane,
    mixed_workload,
    overlaps,
    preempt_and_resume,
    server_env,
    survives_a_crash,
    wait_state,
)
from slurm_cluster import SlurmCluster

# One Slurm cluster at a time: under pytest-xdist these modules share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def test_a_two_node_job_is_preempted_checkpoints_and_resumes(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    env = server_env({"SLURM_CONF": slurm.env["SLURM_CONF"]})
    args = ["--executor", "slurm", "--slurm-partition", "gpu"]
    with control_plane(tmp_path, args, env) as client:
        preempt_and_resume(client)


def test_a_mixed_workload_ends_and_never_shares_a_whole_gpu(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Seeded jobs of 1-8 GPUs and memory shares, with priorities (so, preemptions by
    checkpoint) and cancellations: every job not cancelled succeeds, none restarted after a
    failure, and no two jobs' runs held one whole GPU of one node at the same time."""
    record = tmp_path / "record"
    record.mkdir()
    env = server_env({"SLURM_CONF": slurm.env["SLURM_CONF"]})
    args = ["--executor", "slurm", "--slurm-partition", "gpu"]
    with control_plane(tmp_path, args, env) as client:
        jobs = mixed_workload(client, record, seed=4, count=12)
    assert {j["state"] for j in jobs} <= {"SUCCEEDED", "CANCELLED"}, jobs
    assert sum(j["state"] == "SUCCEEDED" for j in jobs) >= 8
    assert all(j["restarts"] == 0 for j in jobs)
    assert sum(j["preemptions"] for j in jobs) > 0  # the priorities did preempt
    assert overlaps(record) == []


def test_fake_gpus_an_unknown_executor_and_a_missing_partition_are_refused(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    env = server_env({"SLURM_CONF": slurm.env["SLURM_CONF"]})
    home = ["--home", str(tmp_path / "h"), "--port", "0"]

    def refused(*args: str) -> str:
        done = subprocess.run(
            [*CLI, "server", *home, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done
        return " ".join(done.stderr.split())  # Rich folds long lines

    assert "--fake-gpus" in refused("--executor", "slurm", "--fake-gpus", "2x80GiB")
    assert "DANLU_EXECUTOR" in refused("--executor", "nomad")
    said = refused("--executor", "slurm", "--slurm-partition", "nosuch")
    assert "nosuch" in said and "--slurm-partition" in said


def test_runs_outlive_a_crashed_control_plane(slurm: SlurmCluster, tmp_path: Path) -> None:
    env = server_env({"SLURM_CONF": slurm.env["SLURM_CONF"]})
    args = ["--executor", "slurm", "--slurm-partition", "gpu"]
    survives_a_crash(tmp_path, args, env)


def test_a_node_taken_out_of_the_partition_has_its_job_resume_on_another(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """With ``DANLU_INVENTORY_REFRESH=1``: node ``n2`` taken out of the partition leaves the
    inventory, and the job running there is stopped, re-queued without a restart counted and
    run again on ``n1``; put back, ``n2`` is in the inventory again."""
    env = server_env({"SLURM_CONF": slurm.env["SLURM_CONF"], "DANLU_INVENTORY_REFRESH": "1"})
    args = ["--executor", "slurm", "--slurm-partition", "gpu"]
    code = (
        "import os, time; print('on', os.environ['SLURMD_NODENAME'], flush=True);"
        " time.sleep(60 if os.environ['SLURMD_NODENAME'] == 'n2' else 0)"
    )
    with control_plane(tmp_path, args, env) as client:
        filler = client.submit(
            {
                "name": "filler",
                "command": [sys.executable, "-c", "import time; time.sleep(8)"],
                "resources": {"gpus": 4},
            }
        )
        wait_state(client, filler["id"], "RUNNING")
        job = client.submit(
            {"name": "moved", "command": [sys.executable, "-c", code], "resources": {"gpus": 2}}
        )
        running = wait_state(client, job["id"], "RUNNING")
        assert {s["node"] for s in running["allocation"]} == {"n2"}, running
        deadline = time.monotonic() + 30
        while "on n2" not in client.logs(job["id"])[0]:
            assert time.monotonic() < deadline, client.logs(job["id"])
            time.sleep(0.2)
        slurm.run("scontrol", "update", "PartitionName=gpu", "Nodes=n1")
        try:
            done = wait_state(client, job["id"], "SUCCEEDED", timeout=90)
            assert [n["name"] for n in client.nodes()] == ["n1"]
        finally:
            slurm.run("scontrol", "update", "PartitionName=gpu", "Nodes=n1,n2")
        assert done["restarts"] == 0 and done["preemptions"] == 1
        log = client.logs(job["id"])[0]
        assert [line for line in log.splitlines() if line.startswith("on ")] == ["on n2", "on n1"]
        reasons = [e["reason"] for e in client.events(job["id"])]
        assert any("left the inventory (n2:" in r for r in reasons), reasons
        deadline = time.monotonic() + 30
        while [n["name"] for n in client.nodes()] != ["n1", "n2"]:
            assert time.monotonic() < deadline, client.nodes()
            time.sleep(0.3)
