"""What the start-up does to the store is said in the log, and a scheduled cordon or drain
says when it takes effect.

An upgrade of danlu migrated the database at start-up without a word (Alembic's own lines
are quieted), so an operator could not tell from the log whether, or from which revision, it
was migrated, nor that a plane started on a restored backup had found an empty database and
made a new one. And the cordon or drain an admin scheduled for a maintenance window
(``danlu drain NODE --at 02:00``) took effect with nothing in the log.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from alembic import command
from helpers import user_and_nodes
from sqlalchemy import Engine

from danlu.config import load_settings
from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database, current_revision, head_revision, make_engine
from danlu.server.db import migrate as migrate_module
from danlu.server.main import prepare
from danlu.server.services import nodes
from danlu.server.upkeep import Upkeep, close_nodes

NOW = 1_000_000.0
OLDER = "0034"
"""A revision older than the newest, which every danlu since has migrated from."""


def downgrade(engine: Engine, revision: str) -> None:
    """Take a migrated database back to ``revision``, as an older danlu left it."""
    config = migrate_module.alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def _start(home: Path, url: str) -> None:
    """Prepare a control plane on ``url`` (with its loops, so that it takes the lease and
    migrates as ``danlu server`` does) and close it again."""
    settings = load_settings(home=home, database_url=url, interval=0.5)
    prepared = prepare(settings, port=0, fake_gpus="1x80GiB", start_loops=True)
    prepared.close()


def test_the_upgrade_of_an_older_database_is_said_with_both_revisions(
    fresh_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(fresh_url)
    try:
        migrate_module.upgrade_database(engine)
        downgrade(engine, OLDER)
        assert current_revision(engine) == OLDER
    finally:
        engine.dispose()
    with caplog.at_level(logging.INFO, logger="danlu.server.main"):
        _start(tmp_path / "home", fresh_url)
    said = [r.getMessage() for r in caplog.records if r.name == "danlu.server.main"]
    line = f"from revision {OLDER} to {head_revision()}"
    assert any("migrated the database" in m and line in m for m in said), said
    assert any("restoring the backup taken before this upgrade" in m for m in said), said
    assert not any("password" in m.lower() for m in said), said
    # started again on the migrated database: nothing is migrated, and nothing said of it
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="danlu.server.main"):
        _start(tmp_path / "home", fresh_url)
    assert not any("the database" in r.getMessage() for r in caplog.records), caplog.text


def test_a_database_made_anew_is_said(
    fresh_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A plane pointed at an empty database (a restore that went to another database) says
    it made it, rather than serving an empty store without a word."""
    with caplog.at_level(logging.INFO, logger="danlu.server.main"):
        _start(tmp_path / "home", fresh_url)
    said = [r.getMessage() for r in caplog.records if r.name == "danlu.server.main"]
    assert any("made the database" in m and "it was empty" in m for m in said), said


def test_the_upgrade_returns_what_it_did(fresh_url: str) -> None:
    engine = make_engine(fresh_url)
    try:
        made = migrate_module.upgrade_database(engine)
        assert (made.before, made.after, made.changed) == (None, head_revision(), True)
        again = migrate_module.upgrade_database(engine)
        assert (again.before, again.after, again.changed) == (head_revision(),) * 2 + (False,)
        downgrade(engine, OLDER)
        migrated = migrate_module.upgrade_database(engine)
        assert (migrated.before, migrated.after) == (OLDER, head_revision())
        assert f"from revision {OLDER} to {head_revision()}" in migrated.describe("DB")
    finally:
        engine.dispose()


def test_a_scheduled_drain_taking_effect_is_said_with_its_reason(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    with db.session() as s:
        user_and_nodes(s, (Node("a", 1, gpu_type("H100")), Node("b", 1, gpu_type("H100"))), NOW)
        nodes.cordon(s, "a", "firmware", drain=True, at=NOW + 100, now=NOW)
        nodes.cordon(s, "b", at=NOW + 100, now=NOW)
    out = Upkeep()
    with caplog.at_level(logging.INFO, logger="danlu.server.upkeep"):
        close_nodes(db, NOW + 50, out)
        assert out.closed_nodes == []
        assert not caplog.records
        close_nodes(db, NOW + 100, out)
    assert sorted(out.closed_nodes) == ["a", "b"]
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("node a: its scheduled drain took effect (firmware)") for m in said)
    assert "node b: its scheduled cordon took effect (scheduled cordon)" in said, said
