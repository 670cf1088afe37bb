"""Run the Alembic migrations programmatically (at server start and in tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine

from danlu.core.errors import ConfigError
from danlu.server.db.engine import make_engine

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config() -> Config:
    """An Alembic config pointing at the packaged migration scripts (no alembic.ini)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def head_revision() -> str:
    """The newest revision shipped with this version of danlu."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the migrations directory has no revision"
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` for an empty database)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _check_known(conn: Connection, script: ScriptDirectory) -> None:
    """Raise :class:`ConfigError` when the database is at a revision this danlu does not
    ship: a newer danlu migrated it, and Alembic would fail with a traceback."""
    known = {rev.revision for rev in script.walk_revisions()}
    unknown = [
        rev for rev in MigrationContext.configure(conn).get_current_heads() if rev not in known
    ]
    if unknown:
        shown = conn.engine.url.render_as_string(hide_password=True)
        raise ConfigError(
            f"the database {shown} is at revision {', '.join(unknown)}, which this danlu does "
            f"not know (newer than its newest, {script.get_current_head()}): a newer danlu "
            "migrated it; upgrade danlu, or restore the backup of the database taken before "
            "that upgrade"
        )


def upgrade_database(url_or_engine: str | Engine, revision: str = "head") -> None:
    """Migrate the database to ``revision`` (default: the newest). Idempotent. A database at
    a revision this danlu does not know (newer), or one Alembic cannot migrate, is a
    :class:`ConfigError` naming it (its password hidden)."""
    engine = make_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    try:
        config = alembic_config()
        with engine.begin() as conn:
            _check_known(conn, ScriptDirectory.from_config(config))
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    except CommandError as exc:
        shown = engine.url.render_as_string(hide_password=True)
        raise ConfigError(f"cannot migrate the database {shown}: {exc}") from None
    finally:
        if isinstance(url_or_engine, str):
            engine.dispose()
