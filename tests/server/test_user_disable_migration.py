"""Revision 0036 (``users.disabled_at``): the users stored before are enabled after the
upgrade, and a downgrade drops the column again, keeping the users and their tokens. On
SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from danlu.server.db import Database, current_revision, head_revision, upgrade_database
from danlu.server.db.migrate import alembic_config
from danlu.server.db.models import Base
from danlu.server.services import users

NOW = 1_000_000.0


def _columns(db: Database) -> set[str]:
    return {c["name"] for c in inspect(db.engine).get_columns("users")}


@pytest.mark.filterwarnings(
    "ignore:Skipped unsupported reflection of expression-based index:sqlalchemy.exc.SAWarning",
    "ignore:autogenerate skipping metadata-specified expression-based index:UserWarning",
)
def test_the_users_are_enabled_after_the_upgrade_and_kept_by_a_downgrade(db_url: str) -> None:
    db = Database(db_url)
    try:
        with db.session() as s:
            alice = users.create_user(s, "alice", now=NOW)
            users.issue_token(s, alice, "laptop", now=NOW)
            alice.disabled_at = NOW
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0035")
        assert current_revision(db.engine) == "0035"
        assert "disabled_at" not in _columns(db)
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT name FROM users")).scalars().all() == ["alice"]
            assert conn.execute(text("SELECT count(*) FROM api_tokens")).scalar_one() == 1
        upgrade_database(db.engine)
        assert current_revision(db.engine) == head_revision() >= "0036"
        assert "disabled_at" in _columns(db)
        with db.session() as s:
            assert users.get_user(s, "alice").disabled_at is None  # enabled, as before
        with db.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        upgrade_database(db.engine)  # the PostgreSQL template is shared: leave it at head
        db.dispose()
