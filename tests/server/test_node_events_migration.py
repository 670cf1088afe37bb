"""Revision 0040 (``node_events``): the nodes stored before start their history at the
upgrade, a node the inventory lists with a ``joined`` event naming its GPUs, one kept only
for an admin's cordon while it is missing with a ``lost`` one (so that its return is told as
``back``); a downgrade drops the table, keeping the nodes. On SQLite and PostgreSQL."""

from __future__ import annotations

import time

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database, current_revision, head_revision, upgrade_database
from danlu.server.db.migrate import alembic_config
from danlu.server.db.models import Base
from danlu.server.services import cluster, node_events, nodes

NOW = 1_000_000.0


@pytest.mark.filterwarnings(
    "ignore:Skipped unsupported reflection of expression-based index:sqlalchemy.exc.SAWarning",
    "ignore:autogenerate skipping metadata-specified expression-based index:UserWarning",
)
def test_the_nodes_stored_before_start_their_history_at_the_upgrade(db_url: str) -> None:
    db = Database(db_url)
    try:
        with db.session() as s:
            cluster.replace_inventory(
                s, [Node("a", 4, gpu_type("H100")), Node("b", 2, gpu_type("L4"))], now=NOW
            )
            nodes.cordon(s, "b", "rebooting", now=NOW)
            cluster.replace_inventory(s, [Node("a", 4, gpu_type("H100"))], now=NOW)  # b absent
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0039")
        assert current_revision(db.engine) == "0039"
        assert "node_events" not in inspect(db.engine).get_table_names()
        before = time.time()
        upgrade_database(db.engine)
        assert current_revision(db.engine) == head_revision() >= "0040"
        with db.session() as s:
            told = {
                name: [(e.kind, e.actor, e.detail) for e in node_events.list_node_events(s, name)]
                for name in ("a", "b")
            }
            times = [e.time for e in node_events.list_node_events(s, "a")]
            # b is reported again: its history goes on from the lost the upgrade gave it
            cluster.replace_inventory(
                s, [Node("a", 4, gpu_type("H100")), Node("b", 2, gpu_type("L4"))]
            )
            b = [e.kind for e in node_events.list_node_events(s, "b")]
        assert told == {
            "a": [("joined", None, "in the inventory when its history began: 4x H100")],
            "b": [("lost", None, "not in the inventory when its history began")],
        }
        assert before <= times[0] <= time.time()  # timed at the upgrade
        assert b == ["lost", "back"]
        with db.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        upgrade_database(db.engine)  # the PostgreSQL template is shared: leave it at head
        db.dispose()
