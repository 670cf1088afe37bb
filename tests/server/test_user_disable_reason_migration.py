"""Revision 0038 (``users.disabled_by``, ``users.disable_reason``): a user disabled before
stays disabled after the upgrade, by no one named and for no reason given; a downgrade
drops the columns again, keeping the users, their disables and their tokens. On SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from danlu.server.db import Database, current_revision, head_revision, upgrade_database
from danlu.server.db.migrate import alembic_config
from danlu.server.db.models import Base
from danlu.server.services import disabling, users

NOW = 1_000_000.0
COLUMNS = {"disabled_by", "disable_reason"}


def _columns(db: Database) -> set[str]:
    return {c["name"] for c in inspect(db.engine).get_columns("users")}


@pytest.mark.filterwarnings(
    "ignore:Skipped unsupported reflection of expression-based index:sqlalchemy.exc.SAWarning",
    "ignore:autogenerate skipping metadata-specified expression-based index:UserWarning",
)
def test_a_disabled_user_stays_disabled_without_a_reason_across_the_revision(
    db_url: str,
) -> None:
    db = Database(db_url)
    try:
        with db.session() as s:
            alice = users.create_user(s, "alice", now=NOW)
            users.issue_token(s, alice, "laptop", now=NOW)
            root = users.create_user(s, "root", "admin", now=NOW)
            disabling.disable(s, "alice", root, reason="left the team", now=NOW)
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0037")
        assert current_revision(db.engine) == "0037"
        assert not COLUMNS & _columns(db)
        with db.engine.connect() as conn:
            rows = conn.execute(text("SELECT name, disabled_at FROM users ORDER BY name")).all()
            assert [tuple(r) for r in rows] == [("alice", NOW), ("root", None)]
            assert conn.execute(text("SELECT count(*) FROM api_tokens")).scalar_one() == 1
        upgrade_database(db.engine)
        assert current_revision(db.engine) == head_revision() >= "0038"
        assert _columns(db) >= COLUMNS
        with db.session() as s:
            alice = users.get_user(s, "alice")
            assert (alice.disabled_at, alice.disabled_by, alice.disable_reason) == (NOW, None, None)
            assert users.disabled_message(alice).startswith("user 'alice' is disabled: ")
        with db.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        upgrade_database(db.engine)  # the PostgreSQL template is shared: leave it at head
        db.dispose()
