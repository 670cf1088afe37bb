"""Revision 0039 (``user_events``): the users stored before start their history with what
their rows tell, a ``created`` event each and a ``disabled`` one for a disabled user (by
whom, why), oldest first; a downgrade drops the table, keeping the users. On SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from danlu.server.db import Database, current_revision, head_revision, upgrade_database
from danlu.server.db.migrate import alembic_config
from danlu.server.db.models import Base
from danlu.server.services import disabling, user_events, users

NOW = 1_000_000.0


@pytest.mark.filterwarnings(
    "ignore:Skipped unsupported reflection of expression-based index:sqlalchemy.exc.SAWarning",
    "ignore:autogenerate skipping metadata-specified expression-based index:UserWarning",
)
def test_the_users_stored_before_start_their_history_with_their_rows(db_url: str) -> None:
    db = Database(db_url)
    try:
        with db.session() as s:
            root = users.create_user(s, "root", "admin", now=NOW + 1)
            users.create_user(s, "alice", now=NOW)
            disabling.disable(s, "alice", root, reason="left the team", now=NOW + 2)
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0038")
        assert current_revision(db.engine) == "0038"
        assert "user_events" not in inspect(db.engine).get_table_names()
        upgrade_database(db.engine)
        assert current_revision(db.engine) == head_revision() >= "0039"
        with db.read_session() as s:
            told = {
                name: [
                    (e.id, e.time, e.kind, e.actor, e.detail)
                    for e in user_events.list_user_events(s, users.get_user(s, name))
                ]
                for name in ("alice", "root")
            }
        alice, admin = told["alice"], told["root"]
        assert [row[1:] for row in alice] == [
            (NOW, "created", None, "role user"),
            (NOW + 2, "disabled", "root", "left the team"),
        ]
        assert [row[1:] for row in admin] == [(NOW + 1, "created", None, "role admin")]
        assert alice[0][0] < admin[0][0] < alice[1][0]  # ids in the order of the times
        with db.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        upgrade_database(db.engine)  # the PostgreSQL template is shared: leave it at head
        db.dispose()
