"""A maintenance window has an end: ``danlu drain NODE --at TIME --until TIME`` (``until``)
uncordons the node then, said in the log and in the pass's report; the end is shown with the
node (``danlu nodes``, the API), refused when it is not later than the window's start, and
dropped by an uncordon. A drain had no end: the node stayed closed until an admin uncordoned
it. On SQLite, the clock injected."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers import user_and_nodes

from danlu.cli import nodes as nodes_cli
from danlu.cli.node_tables import node_label
from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.errors import SpecError
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.routes.schemas import nodes_out
from danlu.server.services import cluster, jobs, nodes

NOW = 1_000_000.0
A, B = Node("a", 1, gpu_type("H100")), Node("b", 1, gpu_type("H100"))


@contextmanager
def _loop(db: Database, tmp_path: Path) -> Iterator[tuple[Reconciler, FakeWorld]]:
    world = FakeWorld()
    world.default = world.default.__class__(duration=10_000)
    executor = FakeExecutor(Cluster((A, B)), world)
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        yield loop, world
    finally:
        loop.stop()


def _node(db: Database, name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Node ``name``'s state, reason, ``open_at``, ``close_at`` and ``close_until``, and the
    node as the API shows it."""
    with db.read_session() as s:
        (row,) = [n for n in cluster.list_nodes(s) if n.name == name]
        (shown,) = nodes_out([row], [], None)
        kept = (nodes.state(row), row.cordon_reason, row.open_at, row.close_at, row.close_until)
        return kept, shown


def test_a_drain_with_an_end_uncordons_the_node_then(
    sqlite_db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = sqlite_db
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
        nodes.cordon(s, "b", "spare", now=NOW)  # everything goes to a
        node = nodes.cordon(s, "a", "firmware", drain=True, at=NOW + 100, until=NOW + 200, now=NOW)
        assert (nodes.state(node), node.close_until, node.open_at) == ("ready", NOW + 200, None)
    _, shown = _node(db, "a")
    assert (shown["close_at"], shown["close_until"], shown["open_at"]) == (
        NOW + 100,
        NOW + 200,
        None,
    )
    assert "until " in node_label(shown).split("[drain at", 1)[1]  # danlu nodes shows it
    body = {"name": "j", "command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        job_id = jobs.submit(s, body, alice, now=NOW).id
    caplog.set_level(logging.INFO, logger="danlu.server.upkeep")
    with _loop(db, tmp_path) as (loop, _world):
        assert loop.run_once(now=NOW).launched == [job_id]
        report = loop.run_once(now=NOW + 120)  # the window begins: drained, with its end
        assert report.closed_nodes == ["a"] and report.preempted == [job_id]
        assert report.opened_nodes == []
        row, shown = _node(db, "a")
        assert row == ("draining", "firmware", NOW + 200, None, None)
        assert shown["open_at"] == NOW + 200
        assert "; until " in node_label(shown)  # danlu nodes: [draining: firmware; until ...]
        assert loop.run_once(now=NOW + 150).opened_nodes == []

        report = loop.run_once(now=NOW + 210)  # the window ends: open, the job back on a
        assert report.opened_nodes == ["a"]
        row, _ = _node(db, "a")
        assert row == ("ready", "", None, None, None)
        assert loop.run_once(now=NOW + 220).opened_nodes == []  # once
    said = [r.getMessage() for r in caplog.records if r.name == "danlu.server.upkeep"]
    assert any("took effect (firmware)" in line and "it ends at" in line for line in said)
    (ended,) = [line for line in said if "ended at" in line]
    assert ended.startswith("node a: its drain ended at 1970-01-12T13:50:00+00:00 (--until)")
    assert "it was draining: firmware" in ended


def test_an_end_is_refused_before_the_start_and_dropped_by_uncordon(
    sqlite_db: Database,
) -> None:
    db = sqlite_db
    with db.session() as s:
        user_and_nodes(s, (A, B), NOW)
    bad = [
        ({"at": NOW + 100, "until": NOW + 100}, "later than at"),
        ({"at": NOW + 100, "until": NOW + 50}, "later than at"),
        ({"until": NOW - 1}, "later than now"),
        ({"at": NOW - 10, "until": NOW}, "later than now"),  # at past: done now
        ({"until": NOW + 50, "gpu": 0}, "one GPU has no end"),
    ]
    for given, words in bad:
        with db.session() as s, pytest.raises(SpecError, match=words) as err:
            nodes.cordon(s, "a", drain=True, now=NOW, **given)
        assert err.value.field == "until"
    with db.session() as s:
        node = nodes.cordon(s, "a", "now", drain=True, until=NOW + 60, now=NOW)
        assert (nodes.state(node), node.open_at) == ("draining", NOW + 60)
        nodes.cordon(s, "a", "later", at=NOW + 100, until=NOW + 300, now=NOW)
        nodes.uncordon(s, "a")
        assert (node.open_at, node.close_at, node.close_until) == (None, None, None)
        assert nodes.open_due(s, NOW + 400) == []  # nothing left to open
        # a close done now without an end replaces the end of the one before
        nodes.cordon(s, "b", "maintenance", until=NOW + 60, now=NOW)
        b = nodes.cordon(s, "b", "bad DIMM", now=NOW + 10)
        assert (nodes.state(b), b.open_at) == ("cordoned", None)
        assert nodes.open_due(s, NOW + 100) == []


def test_the_cli_counts_until_from_at_and_refuses_an_end_before_it() -> None:
    at = NOW + 3600
    assert nodes_cli.window_end("+2h", at, None, NOW) == at + 7200
    assert nodes_cli.window_end("+30m", None, None, NOW) == NOW + 1800
    with pytest.raises(SpecError, match="--until"):
        nodes_cli.window_end("1970-01-01T00:00:00+00:00", at, None, NOW)
    with pytest.raises(SpecError, match=r"--until.*one GPU"):
        nodes_cli.window_end("+1h", None, 0, NOW)
