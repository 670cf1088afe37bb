"""The executor's nodes read again while the control plane runs (``DANLU_INVENTORY_REFRESH``):
a node that joins is scheduled onto, the jobs of a node that leaves (or loses GPUs) are
re-queued to resume elsewhere, cordons stay with their nodes, and a backend that cannot be
asked changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import user_and_nodes
from sqlalchemy.exc import OperationalError

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.devices import inventory_from_cluster
from danlu.executors import ExecutorUnavailableError, FakeExecutor, FakeWorld, Script
from danlu.sched.registry import make_policy
from danlu.server import inventory as refresh_module
from danlu.server.db import Database
from danlu.server.inventory import compare
from danlu.server.metrics import ServerMetrics
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, events, jobs, nodes

NOW = 1_000_000.0
H100 = gpu_type("H100")


def _node(name: str, gpus: int = 2) -> Node:
    return Node(name, gpus, H100)


def _two_jobs(db: Database, tmp_path: Path, every: float = 30.0) -> tuple[Reconciler, FakeWorld]:
    """Nodes ``a`` and ``b`` of 2 GPUs, each running one job of 2 GPUs (of 1,000 s), under a
    loop that reads the nodes every ``every`` seconds."""
    before = Cluster((_node("a"), _node("b")))
    with db.session() as s:
        alice = user_and_nodes(s, before.nodes, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 2}}
        for i in range(2):
            jobs.submit(s, {"name": f"j{i}", **body}, alice, now=NOW)
    world = FakeWorld()
    world.default = Script(duration=1000, checkpoint_seconds=30)
    settings = load_settings(home=tmp_path, inventory_refresh=every)
    metrics = ServerMetrics(db, inventory_from_cluster(before))
    loop = Reconciler(
        db, FakeExecutor(before, world), settings, metrics=metrics, policy=make_policy("fifo")
    )
    assert len(loop.run_once(now=NOW + 10).launched) == 2
    return loop, world


def _node_of(world: FakeWorld, job_id: str) -> str:
    """The node the last run of ``job_id`` was launched on, by name."""
    return world.runs[job_id].nodes[0]


def _stored(db: Database) -> list[tuple[str, int]]:
    with db.read_session() as s:
        return [(n.name, len(n.gpus)) for n in cluster.list_nodes(s)]


def test_a_node_that_joins_is_used_and_the_jobs_of_one_that_left_resume_elsewhere(
    db: Database, tmp_path: Path
) -> None:
    loop, world = _two_jobs(db, tmp_path)
    by_node = {_node_of(world, job_id): job_id for job_id in world.runs}
    on_a, on_b = by_node["a"], by_node["b"]
    with db.session() as s:
        nodes.cordon(s, "a", "disk check", now=NOW + 11)
    # node b leaves the cluster with its run; node c joins
    del world.runs[on_b]
    world.cluster = Cluster((_node("c", 4), _node("a")))
    assert loop.run_once(now=NOW + 20).inventory == []  # not due yet: 30 s after NOW + 10
    report = loop.run_once(now=NOW + 40)
    assert report.errors == []
    assert report.inventory == ["+c", "-b"]
    assert report.settled == [on_b] and report.launched == [on_b]
    assert [n.name for n in loop.executor.inventory().nodes] == ["a", "c"]  # a kept its place
    assert _stored(db) == [("a", 2), ("c", 4)]
    assert _node_of(world, on_b) == "c"
    with db.read_session() as s:
        assert [g["node"] for g in jobs.get_job(s, on_b).allocation] == ["c", "c"]
        reasons = [e.reason for e in events.list_events(s, on_b)]
        assert any("left the inventory (b:0, b:1)" in r for r in reasons)
        assert jobs.get_job(s, on_a).state == "RUNNING"
        assert nodes.state(next(n for n in cluster.list_nodes(s) if n.name == "a")) == "cordoned"
    assert loop.metrics is not None
    assert b"danlu_gpus 6.0" in loop.metrics.exposition()
    assert loop.run_once(now=NOW + 80).inventory == []  # read again, unchanged
    loop.stop()


def test_a_node_left_with_fewer_gpus_requeues_the_job_on_those_gone(
    db: Database, tmp_path: Path
) -> None:
    loop, world = _two_jobs(db, tmp_path)
    on_b = next(j for j in world.runs if _node_of(world, j) == "b")
    del world.runs[on_b]
    world.cluster = Cluster((_node("a"), _node("b", 1)))
    report = loop.run_once(now=NOW + 40)
    assert report.inventory == ["~b"] and report.settled == [on_b]
    assert _stored(db) == [("a", 2), ("b", 1)]
    with db.read_session() as s:
        job = jobs.get_job(s, on_b)
        assert (job.state, job.allocation, job.restarts) == ("PENDING", None, 0)
    loop.stop()


class _Unreachable(FakeExecutor):
    """A backend that cannot be asked for its nodes while ``down``."""

    down = True

    def refresh_inventory(self) -> Cluster:
        if self.down:
            raise ExecutorUnavailableError("the controller does not answer")
        return super().refresh_inventory()


def test_a_backend_that_cannot_be_asked_leaves_the_inventory_as_it_was(
    db: Database, tmp_path: Path
) -> None:
    loop, world = _two_jobs(db, tmp_path)
    executor = _Unreachable(loop.executor.inventory(), world)
    loop.executor = loop.inventory.executor = executor
    world.cluster = Cluster((_node("a"),))
    report = loop.run_once(now=NOW + 40)
    assert report.errors == [] and report.inventory == [] and report.settled == []
    assert _stored(db) == [("a", 2), ("b", 2)]
    executor.down = False
    assert loop.run_once(now=NOW + 75).inventory == ["-b"]
    assert _stored(db) == [("a", 2)]
    loop.stop()


class _Counting(FakeExecutor):
    reads = 0

    def refresh_inventory(self) -> Cluster:
        self.reads += 1
        return super().refresh_inventory()


def test_a_refresh_of_zero_reads_the_nodes_only_at_start_up(db: Database, tmp_path: Path) -> None:
    loop, world = _two_jobs(db, tmp_path, every=0.0)
    executor = _Counting(loop.executor.inventory(), world)
    loop.executor = loop.inventory.executor = executor
    world.cluster = Cluster((_node("a"), _node("b"), _node("c")))
    for t in (100, 1000, 10_000):
        assert loop.run_once(now=NOW + t).inventory == []
    assert executor.reads == 0
    assert _stored(db) == [("a", 2), ("b", 2)]
    loop.stop()


def test_compare_names_what_changed() -> None:
    change = compare([_node("a"), _node("b")], [_node("b", 4), _node("c")])
    assert (change.added, change.removed, change.resized) == (("c",), ("a",), ("b",))
    assert change.describe() == ["+c", "-a", "~b"]


def test_a_change_the_store_failed_to_record_is_recorded_at_the_next_pass(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop, world = _two_jobs(db, tmp_path)
    world.cluster = Cluster((_node("a"), _node("b"), _node("c")))
    real = refresh_module.replace_inventory

    def failing(*args: object, **kwargs: object) -> None:
        raise OperationalError("UPDATE nodes", {}, Exception("database is locked"))

    monkeypatch.setattr(refresh_module, "replace_inventory", failing)
    with pytest.raises(OperationalError):
        loop.run_once(now=NOW + 40)
    assert _stored(db) == [("a", 2), ("b", 2)]  # the executor has c, the store not yet
    monkeypatch.setattr(refresh_module, "replace_inventory", real)
    assert loop.run_once(now=NOW + 42).inventory == ["+c"]  # not due, recorded all the same
    assert _stored(db) == [("a", 2), ("b", 2), ("c", 2)]
    assert loop.run_once(now=NOW + 44).inventory == []
    loop.stop()


def test_a_job_placed_on_a_node_the_executor_lacks_is_requeued_not_launched_short(
    db: Database, tmp_path: Path
) -> None:
    """The store's view still has node ``b``, the executor no longer: the job the round
    places there is re-queued, never launched on what is left of its allocation."""
    with db.session() as s:
        alice = user_and_nodes(s, (_node("a"), _node("b")), NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 2}}
        ids = [jobs.submit(s, {"name": f"j{i}", **body}, alice, now=NOW).id for i in range(2)]
    world = FakeWorld()
    world.default = Script(duration=1000)
    executor = FakeExecutor(Cluster((_node("a"),)), world)
    settings = load_settings(home=tmp_path, inventory_refresh=0)
    loop = Reconciler(db, executor, settings, policy=make_policy("fifo"))
    report = loop.run_once(now=NOW + 10)
    assert report.launched == [ids[0]] and report.settled == [ids[1]]
    assert [launch.job_id for launch in world.launches] == [ids[0]]
    with db.read_session() as s:
        job = jobs.get_job(s, ids[1])
        assert (job.state, job.allocation, job.restarts) == ("PENDING", None, 0)
    loop.stop()


def _closed(db: Database) -> dict[str, str]:
    with db.read_session() as s:
        return {n.name: n.cordon_reason for n in cluster.list_nodes(s) if n.cordoned_at}


def test_nodes_the_backend_takes_out_of_service_are_closed_while_it_does(
    db: Database, tmp_path: Path
) -> None:
    loop, world = _two_jobs(db, tmp_path)
    world.out_of_service = {"b": "Slurm reports it DRAIN: fan", "a": "Slurm reports it DOWN"}
    with db.session() as s:
        nodes.cordon(s, "a", "memory test", now=NOW + 20)
    assert loop.run_once(now=NOW + 20).inventory == []  # not due: nothing read yet
    assert _closed(db) == {"a": "memory test"}
    loop.run_once(now=NOW + 50)
    assert _closed(db) == {"a": "memory test", "b": "executor: Slurm reports it DRAIN: fan"}
    world.out_of_service = {"b": "Slurm reports it DOWN+DRAIN: fan"}
    loop.run_once(now=NOW + 90)
    assert _closed(db)["b"] == "executor: Slurm reports it DOWN+DRAIN: fan"
    with db.read_session() as s:  # the job there runs on
        assert sum(j.state == "RUNNING" for j in jobs.list_jobs(s)) == 2
    world.out_of_service = {}
    loop.run_once(now=NOW + 130)
    assert _closed(db) == {"a": "memory test"}  # the admin's cordon stays
    loop.stop()


def test_nodes_out_of_service_at_start_up_are_closed_at_the_first_pass(
    db: Database, tmp_path: Path
) -> None:
    world = FakeWorld()
    world.out_of_service = {"b": "Slurm reports it DRAIN"}
    executor = FakeExecutor(Cluster((_node("a"), _node("b"))), world)
    executor.refresh_inventory()  # what the server reads at start-up
    with db.session() as s:
        user_and_nodes(s, executor.inventory().nodes, NOW)
    for every in (30.0, 0.0):
        settings = load_settings(home=tmp_path, inventory_refresh=every)
        loop = Reconciler(db, executor, settings, policy=make_policy("fifo"))
        loop.run_once(now=NOW)
        assert _closed(db) == {"b": "executor: Slurm reports it DRAIN"}
        with db.session() as s:
            nodes.uncordon(s, "b")
        loop.run_once(now=NOW + 1)  # synced once: an admin's uncordon holds until a reading
        assert _closed(db) == {}
        loop.stop()
