"""Migration 0031 (``rows_in_flight``): on PostgreSQL the upgrade installs one statement
trigger per feed table, whose advisory lock keys carry the tags the feeds read
(:data:`danlu.server.services.settled.TAGS`); the downgrade removes them and an upgrade
puts them back. On SQLite it installs nothing (one writer at a time)."""

from __future__ import annotations

import importlib

from alembic import command
from sqlalchemy import Engine, text

from danlu.server.db import Database, current_revision, upgrade_database
from danlu.server.db.migrate import alembic_config
from danlu.server.services.settled import TAGS

TRIGGERS = {"job_events_in_flight": "job_events", "job_metrics_in_flight": "job_metrics"}


def _triggers(engine: Engine) -> dict[str, str]:
    """danlu's in-flight triggers on PostgreSQL: name -> table."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT t.tgname, c.relname FROM pg_trigger t "
                "JOIN pg_class c ON c.oid = t.tgrelid "
                "WHERE NOT t.tgisinternal AND t.tgname LIKE '%in_flight'"
            )
        ).all()
    return {name: table for name, table in rows}


def _downgrade(engine: Engine, revision: str) -> None:
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def test_the_migration_uses_the_feeds_tags() -> None:
    """The migration imports no app code, so its copy of the tags is checked here: another
    tag would lock keys the feeds never read, and a row in flight would be served."""
    migration = importlib.import_module("danlu.server.migrations.versions.0031_rows_in_flight")
    assert migration.TAGS == TAGS


def test_the_triggers_exist_at_head_and_go_with_a_downgrade(db_url: str) -> None:
    db = Database(db_url)
    try:
        postgres = db.engine.dialect.name == "postgresql"
        if not postgres:  # SQLite: nothing to install, and the upgrade and downgrade run
            _downgrade(db.engine, "0030")
            assert current_revision(db.engine) == "0030"
            return
        assert _triggers(db.engine) == TRIGGERS
        with db.engine.connect() as conn:
            functions = conn.execute(
                text("SELECT count(*) FROM pg_proc WHERE proname = 'danlu_rows_in_flight'")
            ).scalar_one()
        assert functions == 1
        _downgrade(db.engine, "0030")
        assert _triggers(db.engine) == {}
        upgrade_database(db.engine)
        assert _triggers(db.engine) == TRIGGERS
    finally:
        upgrade_database(db.engine)  # the PostgreSQL template is shared: leave it at head
        db.dispose()
