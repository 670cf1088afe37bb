"""Runs lost when their node leaves the executor's inventory are counted in
``danlu_runs_lost_total{cause="node"}`` (as a poll's node loss is); a job being cancelled is
not (its run was to end anyway), and both causes' series are there from the start, at 0."""

from __future__ import annotations

from pathlib import Path

from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.devices import inventory_from_cluster
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.metrics import ServerMetrics
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs

NOW = 1_000_000.0


def _lost(metrics: ServerMetrics) -> dict[str, float]:
    text = metrics.exposition().decode()
    prefix = 'danlu_runs_lost_total{cause="'
    return {
        line[len(prefix) :].split('"')[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def test_runs_lost_when_their_node_leaves_the_inventory_are_counted(
    db: Database, tmp_path: Path
) -> None:
    before = Cluster(tuple(Node(name, 2, gpu_type("H100")) for name in ("a", "b", "c")))
    with db.session() as s:
        alice = user_and_nodes(s, before.nodes, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 2}}
        ids = [jobs.submit(s, {"name": f"j{i}", **body}, alice, now=NOW).id for i in range(3)]
    world = FakeWorld()
    for job_id in ids:
        world.script(job_id, duration=1000, checkpoint_seconds=30)
    metrics = ServerMetrics(db, inventory_from_cluster(before, "fake"))
    assert _lost(metrics) == {"node": 0.0, "gpu": 0.0}  # there from the start
    settings = load_settings(home=tmp_path, inventory_refresh=5)
    loop = Reconciler(
        db, FakeExecutor(before, world), settings, policy=make_policy("fifo"), metrics=metrics
    )
    assert sorted(loop.run_once(now=NOW + 10).launched) == sorted(ids)
    where = {job_id: world.runs[job_id].nodes[0] for job_id in ids}
    on_b = next(j for j in ids if where[j] == "b")
    on_c = next(j for j in ids if where[j] == "c")
    with db.session() as s:  # its cancellation is being delivered when its node goes
        jobs.cancel_job(s, on_c, now=NOW + 15)
    world.cluster = Cluster((Node("a", 2, gpu_type("H100")),))  # b and c leave
    report = loop.run_once(now=NOW + 20)
    assert sorted(report.settled) == sorted([on_b, on_c])
    with db.read_session() as s:
        assert (jobs.get_job(s, on_b).state, jobs.get_job(s, on_c).state) == (
            "PENDING",
            "CANCELLED",
        )
    assert _lost(metrics) == {"node": 1.0, "gpu": 0.0}
    loop.stop()
