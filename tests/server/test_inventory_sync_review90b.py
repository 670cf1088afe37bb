"""A reading of the executor's nodes whose change is recorded but whose closed nodes cannot
be synced: the pass raised, the change was lost (the next pass found nothing to
record), so the jobs of the nodes that left were never re-queued, and the sync was not made
again until the next reading."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import user_and_nodes
from sqlalchemy.exc import OperationalError

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import FakeExecutor, FakeWorld, Script
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.inventory import nodes as nodes_service
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, jobs

NOW = 1_000_000.0
H100 = gpu_type("H100")


def test_jobs_of_a_node_that_left_are_requeued_when_the_closed_nodes_sync_fails(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = Cluster((Node("a", 2, H100), Node("b", 2, H100)))
    with db.session() as s:
        alice = user_and_nodes(s, before.nodes, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 2}}
        ids = [jobs.submit(s, {"name": f"j{i}", **body}, alice, now=NOW).id for i in range(2)]
    world = FakeWorld()
    world.default = Script(duration=1000, checkpoint_seconds=30)
    settings = load_settings(home=tmp_path, inventory_refresh=30.0)
    loop = Reconciler(db, FakeExecutor(before, world), settings, policy=make_policy("fifo"))
    assert sorted(loop.run_once(now=NOW + 10).launched) == sorted(ids)
    on_b = next(i for i in ids if world.runs[i].nodes[0] == "b")
    # node b leaves the partition (its run is not reported lost) and a is drained there
    world.cluster = Cluster((Node("a", 2, H100),))
    world.out_of_service = {"a": "Slurm reports it DRAIN: fan"}
    real = nodes_service.sync_backend
    calls: list[int] = []

    def failing_once(*args: object, **kwargs: object) -> tuple[list[str], list[str]]:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("UPDATE nodes", {}, Exception("database is locked"))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(nodes_service, "sync_backend", failing_once)
    report = loop.run_once(now=NOW + 40)  # the old code's pass raised here
    assert report.inventory == ["-b"] and on_b in report.settled
    loop.run_once(now=NOW + 42)
    with db.read_session() as s:
        assert jobs.get_job(s, on_b).state == "PENDING"  # re-queued to resume elsewhere
        closed = {n.name: n.cordon_reason for n in cluster.list_nodes(s) if n.cordoned_at}
        assert closed == {"a": "executor: Slurm reports it DRAIN: fan"}  # synced a pass later
    loop.stop()
