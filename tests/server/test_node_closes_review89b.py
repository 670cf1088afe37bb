"""Node closes under concurrency (PostgreSQL): the closes and reopens the
control plane makes by itself (the health program's, the backend's, after failed launches,
the GPU health check's) lock the rows they write, as an admin's cordon does, so an admin's
cordon or drain committed meanwhile is not written over: it was, and the admin's cordon was
then taken back when the program's failure passed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from helpers import user_and_nodes
from interleave import Interleave, Outcome
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database
from danlu.server.db.models import Gpu
from danlu.server.db.models import Node as NodeRow
from danlu.server.errors import NotFoundError
from danlu.server.services import cluster, nodes

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))


def _while_reading(
    db: Database,
    first: Callable[[Session], Any],
    second: Callable[[Session], Any],
    *,
    second_may_fail: bool = False,
) -> Outcome:
    """``first``, paused (PostgreSQL) once it has read the nodes, while ``second`` runs."""
    race = Interleave(db)

    def paused(*args: Any) -> None:
        statement = str(args[2])
        if statement.lstrip().startswith("SELECT") and "FROM nodes" in statement:
            race.pause()

    event.listen(db.engine, "after_cursor_execute", paused)
    try:
        out = race.run(first, second)
    finally:
        event.remove(db.engine, "after_cursor_execute", paused)
    assert out.first_error is None, out.first_error
    assert second_may_fail or out.second_error is None, out.second_error
    return out


def _node(db: Database) -> tuple[str, str, bool]:
    with db.read_session() as s:
        (row,) = [n for n in nodes_rows(s) if n.name == "a"]
        return nodes.state(row), row.cordon_reason, row.draining


def nodes_rows(s: Session) -> list[NodeRow]:
    return list(s.scalars(select(NodeRow)))


def _gpu(db: Database, index: int) -> tuple[bool, str]:
    with db.read_session() as s:
        query = (
            select(Gpu)
            .join(NodeRow, Gpu.node_id == NodeRow.id)
            .where(NodeRow.name == "a", Gpu.index == index)
        )
        gpu = s.scalars(query).one()
        return gpu.cordoned_at is not None, gpu.cordon_reason


def _setup(db: Database) -> None:
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)


def test_an_admin_cordon_during_a_health_program_close_stays_the_admins(db: Database) -> None:
    _setup(db)
    _while_reading(
        db,
        lambda s: nodes.close_marked(s, {"a": "disk failing"}, nodes.PROGRAM_REASON, NOW),
        lambda s: nodes.cordon(s, "a", "maintenance", now=NOW + 1),
    )
    assert _node(db) == ("cordoned", "maintenance", False)
    with db.session() as s:  # the program passes: the admin's cordon stays
        nodes.reopen_marked(s, ["a"], nodes.PROGRAM_REASON)
    assert _node(db)[0] == "cordoned"


def test_an_admin_drain_during_a_reopen_stays(db: Database) -> None:
    _setup(db)
    with db.session() as s:
        nodes.close_marked(s, {"a": "disk failing"}, nodes.PROGRAM_REASON, NOW)
    _while_reading(
        db,
        lambda s: nodes.reopen_marked(s, ["a"], nodes.PROGRAM_REASON),
        lambda s: nodes.cordon(s, "a", "maintenance", drain=True, now=NOW + 1),
    )
    assert _node(db) == ("draining", "maintenance", True)


def test_an_admin_cordon_during_a_failed_launch_count_stays_the_admins(db: Database) -> None:
    _setup(db)
    _while_reading(
        db,
        lambda s: nodes.launch_failed(s, ["a"], "disk full", limit=1, now=NOW),
        lambda s: nodes.cordon(s, "a", "maintenance", now=NOW + 1),
    )
    assert _node(db) == ("cordoned", "maintenance", False)


def test_an_admin_gpu_cordon_during_a_health_check_close_stays_the_admins(db: Database) -> None:
    _setup(db)
    _while_reading(
        db,
        lambda s: nodes.close_faulty(s, [("a", 1, "Xid 79")], NOW),
        lambda s: nodes.cordon(s, "a", "bad fan", gpu=1, now=NOW + 1),
    )
    assert _gpu(db, 1) == (True, "bad fan")  # not the health check's (forgotten later)


def test_an_admin_cordon_during_an_inventory_without_the_node_keeps_its_row(
    db: Database,
) -> None:
    with db.session() as s:
        user_and_nodes(s, (NODE, Node("b", 2, gpu_type("H100"))), NOW)
    out = _while_reading(
        db,
        lambda s: cluster.replace_inventory(s, [NODE], fake=True, now=NOW),  # b rebooting
        lambda s: nodes.cordon(s, "b", "maintenance", now=NOW + 1),
        second_may_fail=True,
    )
    with db.read_session() as s:
        kept = {n.name: n.cordon_reason for n in nodes_rows(s)}
    if out.second_error is None:  # the cordon came first: it outlives the reading
        assert kept.get("b") == "maintenance"  # its row was deleted under it
    else:  # the cordon came after the node left: not found, as it says
        assert isinstance(out.second_error, NotFoundError)
        assert "b" not in kept
