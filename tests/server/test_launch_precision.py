"""The launch the reconcile loop hands the executor carries the job spec's
``training.precision`` (``DANLU_PRECISION`` for ``danlu.train``, which trains in it by
default), when the spec names fp16 or bf16: the memory estimate the job was packed by was
made for it. A spec without one (fp32, the default) launches with none."""

from __future__ import annotations

from pathlib import Path

from helpers import fake_loop, user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.executors.base import job_environment
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.services import jobs

NOW = 1_000_000.0


def test_the_launch_carries_the_specs_precision(db: Database, tmp_path: Path) -> None:
    nodes = (Node("a", 4, gpu_type("H100")),)
    with db.session() as s:
        alice = user_and_nodes(s, nodes, NOW)
        body = {"command": ["python", "train.py"]}
        ids = {
            name: jobs.submit(s, {"name": name, **body, **extra}, alice, now=NOW).id
            for name, extra in (
                ("bf16", {"training": {"precision": "BF16"}}),
                ("fp16", {"training": {"precision": 16}}),
                ("fp32", {"training": {"precision": "fp32"}}),
                ("plain", {}),
            )
        }
    loop, world = fake_loop(db, nodes, tmp_path, make_policy("fifo"), 60)
    assert sorted(loop.run_once(now=NOW).launched) == sorted(ids.values())
    launched = {launch.job_id: launch for launch in world.launches}
    assert {name: launched[i].precision for name, i in ids.items()} == {
        "bf16": "bf16",
        "fp16": "fp16",
        "fp32": None,
        "plain": None,
    }
    env = job_environment({}, launched[ids["bf16"]], None)  # what every executor writes
    assert env["DANLU_PRECISION"] == "bf16"
    assert "DANLU_PRECISION" not in job_environment({}, launched[ids["plain"]], None)
