"""A launch on a memory share tells the job the CUDA context the control plane's estimate
allowed for its node's GPU type (``JobLaunch.gpu_context_bytes``, ``DANLU_GPU_CONTEXT_BYTES``):
the figure of the type the inventory lists (the operator's ``DANLU_SLURM_GPU_TYPE=L4`` for a
Gres type danlu does not know, the default ``generic``), which the job could not read from its
device's name. A launch on whole GPUs (no memory cap) tells none."""

from __future__ import annotations

from pathlib import Path

from helpers import fake_loop, user_and_nodes

from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.spec import parse_spec
from danlu.executors.base import job_environment
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.routes.estimation import _gpu_specs
from danlu.server.services import jobs

NOW = 1_000_000.0
MiB = 1024**2


def test_a_share_is_told_the_context_planned_for_its_nodes_gpu_type(
    sqlite_db: Database, tmp_path: Path
) -> None:
    db = sqlite_db
    nodes = (
        Node("l4", 1, gpu_type("L4")),
        Node("gen", 1, gpu_type("generic")),
        Node("l4-whole", 1, gpu_type("L4")),
    )
    share = {"gpus": 1, "gpu_memory": "8GiB"}
    specs = {
        name: {"name": name, "command": ["python", "train.py"], "resources": resources}
        for name, resources in (
            ("on-l4", {**share, "gpu_type": "L4"}),
            ("on-gen", {**share, "gpu_type": "generic"}),
            ("whole", {"gpus": 1, "gpu_type": "L4"}),
        )
    }
    with db.session() as s:
        alice = user_and_nodes(s, nodes, NOW)
        ids = {name: jobs.submit(s, spec, alice, now=NOW).id for name, spec in specs.items()}
    loop, world = fake_loop(db, nodes, tmp_path, make_policy("fifo"), 60)
    assert sorted(loop.run_once(now=NOW).launched) == sorted(ids.values())
    launched = {launch.job_id: launch for launch in world.launches}
    told = {name: launched[i].gpu_context_bytes for name, i in ids.items()}
    assert told == {"on-l4": 300 * MiB, "on-gen": 768 * MiB, "whole": None}
    # the figure the memory estimate planned for a job that may land only on that node
    cluster = Cluster(nodes)
    for name in ("on-l4", "on-gen"):
        (planned,) = _gpu_specs(parse_spec(specs[name]), cluster)
        assert told[name] == planned.context_bytes
    env = job_environment({}, launched[ids["on-l4"]], None)  # what every executor writes
    assert env["DANLU_GPU_CONTEXT_BYTES"] == str(300 * MiB)
