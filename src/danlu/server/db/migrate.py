"""Run the Alembic migrations programmatically (at server start and in tests)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import DBAPIError, OperationalError

from danlu.core.errors import ConfigError
from danlu.server.db.engine import make_engine
from danlu.server.db.models import Base

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


def known_older_revision(engine: Engine) -> str | None:
    """The revision the database is at when this danlu would migrate it (one of its own
    revisions, older than its newest); ``None`` for an empty database, one at the newest
    revision, or one at a revision this danlu does not ship."""
    current = current_revision(engine)
    if current is None or current == head_revision():
        return None
    known = {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    return current if current in known else None


def _check_known(conn: Connection, script: ScriptDirectory) -> None:
    """Raise :class:`ConfigError` when the database is not one this danlu can migrate: at a
    revision it does not ship (a newer danlu migrated it, or it is another application's,
    whose Alembic revisions are not danlu's numbered ones), or without a revision but with
    tables of danlu's names (another application's database), where Alembic would fail with
    a traceback or a bare "already exists"."""
    shown = conn.engine.url.render_as_string(hide_password=True)
    known = {rev.revision for rev in script.walk_revisions()}
    heads = MigrationContext.configure(conn).get_current_heads()
    unknown = [rev for rev in heads if rev not in known]
    head = script.get_current_head()
    if unknown and all(_newer(rev, head) for rev in unknown):
        raise ConfigError(
            f"the database {shown} is at revision {', '.join(unknown)}, which this danlu does "
            f"not know (newer than its newest, {head}): a newer danlu "
            "migrated it; upgrade danlu, or restore the backup of the database taken before "
            "that upgrade"
        )
    if unknown:
        raise ConfigError(
            f"the database {shown} is at revision {', '.join(unknown)} of migrations that are "
            f"not danlu's (danlu's are numbered, its newest {head}): it is not danlu's "
            "database; give danlu a database of its own (--database-url, DANLU_DATABASE_URL)"
        )
    if not heads:
        taken = sorted(set(inspect(conn).get_table_names()) & set(Base.metadata.tables))
        if taken:
            raise ConfigError(
                f"the database {shown} has no danlu revision but already has tables of "
                f"danlu's names ({', '.join(taken[:5])}): it is not danlu's database (or its "
                "alembic_version table was dropped); give danlu a database of its own "
                "(--database-url, DANLU_DATABASE_URL)"
            )


def _newer(revision: str, head: str | None) -> bool:
    """True if ``revision`` is numbered as danlu numbers its revisions (a number, perhaps
    followed by ``_`` and a name), past ``head``."""
    number = revision.split("_", 1)[0]
    return (
        head is not None
        and head.isdigit()
        and number.isdigit()
        and len(number) == len(head)
        and int(number) > int(head)
    )


MIGRATION_LOCK = 0x64616E6C75
"""The PostgreSQL advisory lock (``pg_advisory_xact_lock``, per database) an upgrade holds
until it commits, so that planes started together migrate one after the other."""


def _first_line(exc: DBAPIError) -> str:
    lines = str(exc.orig or exc).strip().splitlines()
    return lines[0] if lines else type(exc.orig or exc).__name__


@dataclass(frozen=True)
class Migrated:
    """What :func:`upgrade_database` did: the revision the database was at before
    (``None``: an empty database, which it made) and the one it is at now."""

    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        """Whether the upgrade changed the database (made it, or migrated it)."""
        return self.before != self.after

    def describe(self, shown: str) -> str:
        """The operator's line for a database that changed (``shown``: its URL, the password
        hidden): made at a revision, or migrated from one to another (the way back is the
        backup taken before, since an older danlu refuses the database now)."""
        if self.before is None:
            return f"made the database {shown}: it was empty (now at revision {self.after})"
        return (
            f"migrated the database {shown} from revision {self.before} to {self.after}; "
            "a danlu older than this one now refuses it: going back to one means restoring "
            "the backup taken before this upgrade"
        )


def _revision_of(conn: Connection) -> str | None:
    """The database's revision as the upgrade's connection sees it (its heads joined)."""
    heads = MigrationContext.configure(conn).get_current_heads()
    return ", ".join(heads) if heads else None


def upgrade_database(url_or_engine: str | Engine, revision: str = "head") -> Migrated:
    """Migrate the database to ``revision`` (default: the newest). Idempotent, and safe to
    run from several processes at once: on PostgreSQL the upgrade holds an advisory lock
    (:data:`MIGRATION_LOCK`) until it commits, and a SQLite upgrade runs in ``BEGIN
    IMMEDIATE`` transactions (the database's write lock), so the later ones find the database
    migrated. A database at a revision this danlu does not know (newer), one Alembic cannot
    migrate, or a database error on the way is a :class:`ConfigError` naming it (its password
    hidden); an :class:`~sqlalchemy.exc.OperationalError` (unreachable, disk full) is raised
    as it is, for the caller to name its setting and the fix. Returns what it did
    (:class:`Migrated`: nothing changed when another process migrated the database first)."""
    engine = make_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    shown = engine.url.render_as_string(hide_password=True)
    try:
        config = alembic_config()
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            _check_known(conn, ScriptDirectory.from_config(config))
            before = _revision_of(conn)
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
            return Migrated(before, _revision_of(conn))
    except CommandError as exc:
        raise ConfigError(f"cannot migrate the database {shown}: {exc}") from None
    except OperationalError:
        raise
    except DBAPIError as exc:
        if engine.dialect.name == "sqlite":
            fix = (
                "check that it is a SQLite database of danlu's (or a new file) that this user "
                "can read and write, and start danlu again"
            )
        else:
            fix = (
                "check that its user may create and change tables there (PostgreSQL: GRANT "
                "ALL ON SCHEMA public TO that user), and start danlu again"
            )
        reason = _first_line(exc)
        raise ConfigError(f"cannot migrate the database {shown}: {reason}; {fix}") from None
    finally:
        if isinstance(url_or_engine, str):
            engine.dispose()
