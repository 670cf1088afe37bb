"""An admin's cordon with no reason (the CLI's default) of a node the health program or the
executor's backend had closed makes the cordon the admin's: the node stays closed when what
closed it passes, as a node an admin closed does."""

from __future__ import annotations

import stat
from pathlib import Path

from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database
from danlu.server.health import HealthLoop, HealthProgram
from danlu.server.services import cluster, nodes

NOW = 1_000_000.0


def _states(db: Database) -> dict[str, tuple[str, str]]:
    with db.read_session() as s:
        return {n.name: (nodes.state(n), n.cordon_reason) for n in cluster.list_nodes(s)}


def test_an_admin_s_cordon_of_a_node_the_program_closed_outlasts_the_program(
    db: Database, tmp_path: Path
) -> None:
    flag = tmp_path / "broken"
    program = tmp_path / "check-node"
    program.write_text(f'#!/bin/sh\nif [ -e "{flag}" ]; then echo "disk full"; exit 3; fi\n')
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    with db.session() as s:
        user_and_nodes(s, (Node("a", 2, gpu_type("H100")), Node("b", 2, gpu_type("H100"))), NOW)
    loop = HealthLoop(db, None, program=HealthProgram(str(program)), hosts=["a", "b"])
    flag.write_text("x")
    assert loop.run_once(now=NOW + 1) == [
        "a: closed: health program: disk full (exit status 3)",
        "b: closed: health program: disk full (exit status 3)",
    ]
    with db.session() as s:
        nodes.cordon(s, "a", "", now=NOW + 2)  # `danlu cordon a`
        nodes.cordon(s, "b", "  ", now=NOW + 2)
    flag.unlink()
    assert loop.run_once(now=NOW + 3) == []
    assert _states(db) == {
        "a": ("cordoned", nodes.ADMIN_REASON),
        "b": ("cordoned", nodes.ADMIN_REASON),
    }


def test_an_admin_s_cordon_of_a_node_the_backend_closed_outlasts_the_backend(
    db: Database,
) -> None:
    with db.session() as s:
        user_and_nodes(s, (Node("a", 2, gpu_type("H100")), Node("b", 2, gpu_type("H100"))), NOW)
        assert nodes.sync_backend(s, {"a": "down", "b": "down"}, now=NOW) == (["a", "b"], [])
        nodes.cordon(s, "a", "", now=NOW + 1)
    with db.session() as s:
        assert nodes.sync_backend(s, {}, now=NOW + 2) == ([], ["b"])
    assert _states(db) == {"a": ("cordoned", nodes.ADMIN_REASON), "b": ("ready", "")}


def test_an_admin_s_cordon_with_no_reason_keeps_an_admin_s_reason(db: Database) -> None:
    with db.session() as s:
        user_and_nodes(s, (Node("a", 2, gpu_type("H100")),), NOW)
        nodes.cordon(s, "a", "bad fan", now=NOW)
        nodes.cordon(s, "a", "", drain=True, now=NOW + 1)
    assert _states(db) == {"a": ("draining", "bad fan")}
