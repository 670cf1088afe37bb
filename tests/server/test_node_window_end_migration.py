"""Revision 0037 (``nodes.open_at``, ``nodes.close_until``: the end of a maintenance window):
the nodes stored before keep their cordons and scheduled drains, with no end, after the
upgrade, and a downgrade drops the columns again, keeping the nodes. On SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database, current_revision, head_revision, upgrade_database
from danlu.server.db.migrate import alembic_config
from danlu.server.db.models import Base
from danlu.server.services import cluster, nodes

NOW = 1_000_000.0


def _columns(db: Database) -> set[str]:
    return {c["name"] for c in inspect(db.engine).get_columns("nodes")}


@pytest.mark.filterwarnings(
    "ignore:Skipped unsupported reflection of expression-based index:sqlalchemy.exc.SAWarning",
    "ignore:autogenerate skipping metadata-specified expression-based index:UserWarning",
)
def test_the_nodes_keep_their_closes_without_an_end_across_the_revision(db_url: str) -> None:
    db = Database(db_url)
    try:
        with db.session() as s:
            cluster.replace_inventory(
                s, [Node("a", 1, gpu_type("H100")), Node("b", 1, gpu_type("H100"))], now=NOW
            )
            nodes.cordon(s, "a", "bad DIMM", until=NOW + 60, now=NOW)
            nodes.cordon(s, "b", "firmware", drain=True, at=NOW + 100, until=NOW + 200, now=NOW)
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0036")
        assert current_revision(db.engine) == "0036"
        assert not {"open_at", "close_until"} & _columns(db)
        with db.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT name, cordon_reason, close_at FROM nodes ORDER BY name")
            ).all()
            assert [tuple(r) for r in rows] == [("a", "bad DIMM", None), ("b", "", NOW + 100)]
        upgrade_database(db.engine)
        assert current_revision(db.engine) == head_revision() >= "0037"
        assert {"open_at", "close_until"} <= _columns(db)
        with db.read_session() as s:
            kept = {
                n.name: (nodes.state(n), n.close_at, n.open_at, n.close_until)
                for n in cluster.list_nodes(s)
            }
        assert kept == {"a": ("cordoned", None, None, None), "b": ("ready", NOW + 100, None, None)}
        with db.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        upgrade_database(db.engine)  # the PostgreSQL template is shared: leave it at head
        db.dispose()
