"""What an admin set on a node outlives the node's absence from an inventory reading (a Ray
node rebooting, a control plane restarted with fewer fake GPUs): its cordon or drain, its
scheduled window and its GPUs' own cordons apply again when a node of that name returns,
while a node missing from the reading is hidden from ``danlu nodes`` and takes no work.
Automatic closes (the health check's, a backend's, failed launches) are forgotten with the
node, as before."""

from __future__ import annotations

from pathlib import Path

from helpers import user_and_nodes
from sqlalchemy import func, select

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import FakeExecutor, FakeWorld, Script
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.db.models import Gpu
from danlu.server.db.models import Node as NodeRow
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, jobs, nodes

NOW = 1_000_000.0
H100 = gpu_type("H100")


def _node(name: str, gpus: int = 2) -> Node:
    return Node(name, gpus, H100)


def _listed(db: Database) -> dict[str, tuple[str, str, list[str]]]:
    """What ``danlu nodes`` shows: name -> (state, cordon reason, its GPUs' states)."""
    with db.read_session() as s:
        return {
            n.name: (nodes.state(n), n.cordon_reason, [nodes.state(g) for g in n.gpus])
            for n in cluster.list_nodes(s)
        }


def _admin_closes(db: Database) -> None:
    """On ``a``, ``b``, ``c`` of 2 GPUs: ``b`` drained, ``a``'s GPU 1 cordoned, ``c``'s
    drain scheduled for an hour later."""
    with db.session() as s:
        user_and_nodes(s, [_node("a"), _node("b"), _node("c")], NOW)
        nodes.cordon(s, "b", "reboot for firmware", drain=True, now=NOW + 1)
        nodes.cordon(s, "a", "Xid 79", gpu=1, now=NOW + 2)
        nodes.cordon(s, "c", "window", drain=True, at=NOW + 3600, now=NOW + 3)


def test_admin_closes_survive_a_reading_without_the_node_and_apply_again(db: Database) -> None:
    _admin_closes(db)
    with db.session() as s:  # b rebooting, a with one GPU off the bus, c gone for a while
        cluster.replace_inventory(s, [_node("a", 1)], now=NOW + 10)
    assert _listed(db) == {"a": ("ready", "", ["ready"])}  # b and c hidden: not usable
    with db.session() as s:
        view = cluster.load_cluster(s)
        assert [(n.name, n.gpus) for n in view.nodes] == [("a", 1)]
        assert nodes.closed(s, view) == nodes.Closed()  # nothing of a's one GPU is closed
    with db.session() as s:  # everything back under the same names
        cluster.replace_inventory(s, [_node("a"), _node("b"), _node("c")], now=NOW + 20)
    assert _listed(db) == {
        "a": ("ready", "", ["ready", "cordoned"]),
        "b": ("draining", "reboot for firmware", ["ready", "ready"]),
        "c": ("ready", "", ["ready", "ready"]),
    }
    with db.session() as s:
        view = cluster.load_cluster(s)
        assert [(n.name, n.gpus) for n in view.nodes] == [("a", 2), ("b", 2), ("c", 2)]
        closed = nodes.closed(s, view)
        assert (closed.nodes, dict(closed.draining)) == (frozenset({1}), {1: "b"})
        assert closed.gpus == frozenset({1})  # a's GPU 1, flat numbering
        c = next(n for n in cluster.list_nodes(s) if n.name == "c")
        assert (c.close_at, c.close_drain, c.close_reason) == (NOW + 3600, True, "window")
        assert nodes.close_due(s, NOW + 3600) == ["c"]


def test_a_node_absent_from_two_readings_in_a_row_keeps_its_closes(db: Database) -> None:
    _admin_closes(db)
    for t in (10, 20):  # a restart reads the same short inventory again
        with db.session() as s:
            cluster.replace_inventory(s, [_node("a", 1), _node("c")], now=NOW + t)
    with db.session() as s:
        cluster.replace_inventory(s, [_node("c"), _node("b", 3), _node("a", 2)], now=NOW + 30)
    assert _listed(db) == {
        "c": ("ready", "", ["ready", "ready"]),
        "b": ("draining", "reboot for firmware", ["ready", "ready", "ready"]),
        "a": ("ready", "", ["ready", "cordoned"]),
    }
    with db.read_session() as s:
        assert [n.name for n in cluster.load_cluster(s).nodes] == ["c", "b", "a"]


def test_automatic_closes_and_open_nodes_are_forgotten_with_the_node(db: Database) -> None:
    with db.session() as s:
        user_and_nodes(s, [_node("a"), _node("b"), _node("c"), _node("d")], NOW)
        nodes.close_faulty(s, [("a", 1, "GPU lost")], NOW + 1)
        nodes.sync_backend(s, {"b": "Slurm reports it DOWN"}, NOW + 1)
        nodes.launch_failed(s, {"c"}, "EMFILE", limit=1, now=NOW + 1)
    assert {name: state for name, (state, _, _) in _listed(db).items()} == {
        "a": "ready",
        "b": "cordoned",
        "c": "cordoned",
        "d": "ready",
    }
    with db.session() as s:
        cluster.replace_inventory(s, [_node("a", 1)], now=NOW + 10)
        assert s.scalar(select(func.count(NodeRow.id))) == 1  # no row kept for b, c, d
        assert s.scalar(select(func.count(Gpu.id))) == 1
    with db.session() as s:
        cluster.replace_inventory(s, [_node(n) for n in "abcd"], now=NOW + 20)
    assert _listed(db) == {n: ("ready", "", ["ready", "ready"]) for n in "abcd"}


def test_an_admin_close_of_an_automatically_closed_node_is_kept(db: Database) -> None:
    """A node the backend closed, then drained by an admin: the drain is the admin's."""
    with db.session() as s:
        user_and_nodes(s, [_node("a"), _node("b")], NOW)
        nodes.sync_backend(s, {"b": "Slurm reports it DOWN"}, NOW + 1)
        nodes.cordon(s, "b", drain=True, now=NOW + 2)
        nodes.close_faulty(s, [("a", 1, "GPU lost")], NOW + 1)
        nodes.cordon(s, "a", "RMA", gpu=1, now=NOW + 2)  # the admin's now
    with db.session() as s:
        cluster.replace_inventory(s, [_node("a", 1)], now=NOW + 10)
        cluster.replace_inventory(s, [_node("a"), _node("b")], now=NOW + 20)
    assert _listed(db) == {
        "a": ("ready", "", ["ready", "cordoned"]),
        "b": ("draining", nodes.ADMIN_REASON, ["ready", "ready"]),
    }


def test_uncordoning_an_absent_node_lets_it_go(db: Database) -> None:
    _admin_closes(db)
    with db.session() as s:
        cluster.replace_inventory(s, [_node("a"), _node("c")], now=NOW + 10)
        nodes.uncordon(s, "b")  # by name: the admin knows it is gone for good
    with db.session() as s:
        cluster.replace_inventory(s, [_node("a"), _node("c")], now=NOW + 20)
        names = set(s.scalars(select(NodeRow.name)))
        assert names == {"a", "c"}
        cluster.replace_inventory(s, [_node("a"), _node("b"), _node("c")], now=NOW + 30)
    assert _listed(db)["b"] == ("ready", "", ["ready", "ready"])


def test_jobs_on_a_cordoned_node_that_leaves_are_requeued_and_it_stays_closed(
    db: Database, tmp_path: Path
) -> None:
    before = Cluster((_node("a"), _node("b")))
    with db.session() as s:
        alice = user_and_nodes(s, before.nodes, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 2}}
        ids = [jobs.submit(s, {"name": f"j{i}", **body}, alice, now=NOW).id for i in range(2)]
    world = FakeWorld()
    world.default = Script(duration=1000, checkpoint_seconds=30)
    settings = load_settings(home=tmp_path, inventory_refresh=30.0)
    loop = Reconciler(db, FakeExecutor(before, world), settings, policy=make_policy("fifo"))
    try:
        assert len(loop.run_once(now=NOW + 10).launched) == 2
        on_b = next(j for j in ids if world.runs[j].nodes[0] == "b")
        with db.session() as s:
            nodes.cordon(s, "b", "Xid 79", now=NOW + 15)
        del world.runs[on_b]
        world.cluster = Cluster((_node("a"),))
        report = loop.run_once(now=NOW + 40)
        assert report.inventory == ["-b"] and report.settled == [on_b]
        with db.read_session() as s:
            assert jobs.get_job(s, on_b).state == "PENDING"
        world.cluster = before
        assert loop.run_once(now=NOW + 80).inventory == ["+b"]
        assert _listed(db)["b"] == ("cordoned", "Xid 79", ["ready", "ready"])
        loop.run_once(now=NOW + 90)
        with db.read_session() as s:  # b is closed and a busy: it waits
            assert jobs.get_job(s, on_b).state == "PENDING"
    finally:
        loop.stop()


def test_the_node_gauges_count_only_the_nodes_present(db: Database) -> None:
    """A node kept for its admin's drain while it is missing is not counted by the
    ``danlu_nodes`` / ``danlu_gpus_closed`` gauges (Prometheus sees what ``danlu nodes``
    lists)."""
    from danlu.devices import inventory_from_cluster
    from danlu.server.metrics import ServerMetrics

    _admin_closes(db)
    with db.session() as s:
        cluster.replace_inventory(s, [_node("c")], now=NOW + 10)  # a and b gone for now
    metrics = ServerMetrics(db, inventory_from_cluster(Cluster((_node("c"),))))
    text = metrics.exposition().decode()
    assert 'danlu_nodes{state="draining"} 0.0' in text, text
    assert 'danlu_nodes{state="ready"} 1.0' in text, text
    assert 'danlu_gpus_closed{state="cordoned"} 0.0' in text, text
