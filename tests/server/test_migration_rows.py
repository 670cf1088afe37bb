"""Migrations keep the rows of the tables they do not drop.

On SQLite a batch migration recreates a table (copy it, ``DROP TABLE``, rename the copy). With
foreign keys on, that ``DROP TABLE`` deletes every row that refers to the table through
``ON DELETE CASCADE`` (the jobs' events, metrics, runs and energy; the nodes' GPUs), so the
migration environment runs on SQLite with foreign keys off and checks them before it commits.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy import Engine, inspect, text

from danlu.server.db import Database, current_revision, head_revision, make_engine, upgrade_database
from danlu.server.db.migrate import MIGRATIONS, alembic_config

ROW_TABLES = (
    "users",
    "projects",
    "api_tokens",
    "nodes",
    "gpus",
    "jobs",
    "job_events",
    "job_metrics",
    "job_runs",
    "job_energy",
)
JOBS = 3
GPUS = 2


def _fill(engine: Engine) -> None:
    """A user, a project, a token, a node of two GPUs and three jobs, each with an event and
    a metric record (and a run and an energy row where the revision has those tables), in
    plain SQL valid from revision 0001 on."""
    tables = set(inspect(engine).get_table_names())
    user = "(SELECT id FROM users WHERE name = 'alice')"
    project = "(SELECT id FROM projects WHERE name = 'default')"
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO users (name, role, created_at) VALUES ('alice', 'user', 1)"))
        conn.execute(
            text("INSERT INTO projects (name, priority, created_at) VALUES ('default', 0, 1)")
        )
        conn.execute(
            text(
                "INSERT INTO api_tokens (user_id, name, prefix, token_hash, created_at) "
                f"VALUES ({user}, 't', 'abc', 'h1', 1)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO nodes (name, position, gpu_type, rack, cpu_milli, memory, fake,"
                " updated_at) VALUES ('n0', 0, 'H100', 'rack-0', 0, 0, true, 1)"
            )
        )
        for index in range(GPUS):
            conn.execute(
                text(
                    'INSERT INTO gpus (node_id, "index", gpu_type, memory) '
                    "VALUES ((SELECT id FROM nodes WHERE name = 'n0'), :i, 'H100', 80)"
                ),
                {"i": index},
            )
        spec = json.dumps({"name": "j", "command": ["x"], "resources": {"gpus": 1}})
        for j in range(JOBS):
            job = {"id": f"{j:012x}", "spec": spec}
            conn.execute(
                text(
                    "INSERT INTO jobs (id, name, project_id, user_id, priority, spec, state,"
                    " restarts, preemptions, attempt, submitted_at, attained_service, run_time,"
                    f" version, finished_at) VALUES (:id, 'j', {project}, {user}, 0, :spec,"
                    " 'SUCCEEDED', 0, 0, 0, 1, 0, 0, 1, 2)"
                ),
                job,
            )
            conn.execute(
                text(
                    "INSERT INTO job_events (job_id, time, old, new, reason) "
                    "VALUES (:id, 1, NULL, 'PENDING', 'submitted')"
                ),
                job,
            )
            conn.execute(
                text(
                    "INSERT INTO job_metrics (job_id, step, time, data) "
                    "VALUES (:id, 1, 1, '{\"loss\": 1}')"
                ),
                job,
            )
            if "job_runs" in tables:
                conn.execute(
                    text(
                        "INSERT INTO job_runs (job_id, project_id, user_id, started_at, ended_at,"
                        f" gpu_milli, gpu_memory) VALUES (:id, {project}, {user}, 1, 2, 1000, 1)"
                    ),
                    job,
                )
            if "job_energy" in tables:
                conn.execute(
                    text(
                        "INSERT INTO job_energy (job_id, project_id, user_id, run_start,"
                        f" updated_at, joules) VALUES (:id, {project}, {user}, 1, 2, 3)"
                    ),
                    job,
                )


def _counts(engine: Engine) -> dict[str, int]:
    """The number of rows of each of :data:`ROW_TABLES` the database has."""
    tables = set(inspect(engine).get_table_names())
    with engine.connect() as conn:
        return {
            t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()
            for t in ROW_TABLES
            if t in tables
        }


def _downgrade(engine: Engine, revision: str, config: Config | None = None) -> None:
    """Downgrade on a connection handed over in a transaction (as the store tests do)."""
    config = config or alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def _filled(revision: str) -> dict[str, int]:
    """The counts :func:`_fill` makes at ``revision`` (0025 has the runs and energy)."""
    counts = dict.fromkeys(ROW_TABLES, JOBS)
    counts.update(users=1, projects=1, api_tokens=1, nodes=1, gpus=GPUS)
    if revision < "0011":
        del counts["job_runs"]
    if revision < "0019":
        del counts["job_energy"]
    return counts


@pytest.mark.parametrize("revision", ["0009", "0007"])
def test_a_downgrade_keeps_the_rows_of_the_tables_it_keeps(db_url: str, revision: str) -> None:
    """A store at 0025 with rows, upgraded to the head and downgraded past the batch
    migrations of the jobs (0010, 0009 and, to 0007, 0008 of the nodes) keeps every job
    event, metric record and GPU row."""
    db = Database(db_url)
    try:
        _downgrade(db.engine, "0025")
        _fill(db.engine)
        assert _counts(db.engine) == _filled("0025")
        upgrade_database(db.engine)
        assert _counts(db.engine) == _filled("0025")
        _downgrade(db.engine, revision)
        assert current_revision(db.engine) == revision
        assert _counts(db.engine) == _filled(revision)
    finally:
        upgrade_database(db.engine)  # the PostgreSQL template is shared: leave it at head
        db.dispose()


def test_the_cordon_migration_keeps_the_gpus(db_url: str) -> None:
    """A store at 0007 upgraded through 0008 (a batch migration of the nodes) keeps its
    GPUs, and every other row."""
    db = Database(db_url)
    try:
        _downgrade(db.engine, "0007")
        _fill(db.engine)
        assert _counts(db.engine) == _filled("0007")
    finally:
        upgrade_database(db.engine)
    assert _counts(db.engine) == {**_filled("0007"), "job_runs": 0, "job_energy": 0}
    db.dispose()


FUTURE_REVISION = """\
from alembic import op
import sqlalchemy as sa

revision = "9001"
down_revision = {head!r}
branch_labels = None
depends_on = None


def upgrade() -> None:
{upgrade}


def downgrade() -> None:
{downgrade}
"""

RECREATE_UP = """\
    for table in ("jobs", "nodes"):
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.add_column(sa.Column("extra", sa.Integer(), nullable=True))"""
RECREATE_DOWN = """\
    for table in ("jobs", "nodes"):
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.drop_column("extra")"""


def _with_revision(tmp_path: Path, upgrade: str, downgrade: str) -> Config:
    """A copy of the shipped migrations plus a revision 9001 after the head (a migration of
    a future danlu), and an Alembic config pointing at it."""
    scripts = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "versions" / "9001_future.py").write_text(
        FUTURE_REVISION.format(head=head_revision(), upgrade=upgrade, downgrade=downgrade)
    )
    config = Config()
    config.set_main_option("script_location", str(scripts))
    return config


# recreating the jobs drops the one index on an expression (SQLite does not reflect it): a
# real batch migration of the jobs would have to create it again
@pytest.mark.filterwarnings(
    "ignore:Skipped unsupported reflection of expression-based index:sqlalchemy.exc.SAWarning"
)
@pytest.mark.parametrize("handed_over", [True, False], ids=["connection", "url"])
def test_a_batch_migration_of_a_future_danlu_keeps_the_referring_rows(
    tmp_path: Path, handed_over: bool
) -> None:
    """Any batch migration that recreates the jobs and the nodes on SQLite, up and down,
    keeps the events, metrics, runs, energy and GPUs that refer to them, whether Alembic
    runs on a connection handed over in a transaction or on the database's URL."""
    url = f"sqlite:///{tmp_path / 'danlu.db'}"
    upgrade_database(url)
    engine = make_engine(url)
    _fill(engine)
    config = _with_revision(tmp_path, RECREATE_UP, RECREATE_DOWN)
    if handed_over:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "9001")
    else:
        config.attributes["url"] = url
        command.upgrade(config, "9001")
    assert "extra" in {c["name"] for c in inspect(engine).get_columns("jobs")}
    assert _counts(engine) == _filled("9001")
    _downgrade(engine, head_revision(), config)
    assert "extra" not in {c["name"] for c in inspect(engine).get_columns("nodes")}
    assert _counts(engine) == _filled("9001")
    engine.dispose()


def test_a_migration_that_leaves_a_dangling_row_is_rolled_back(tmp_path: Path) -> None:
    """The foreign keys, off while a migration runs on SQLite, are checked before it
    commits: a row referring to no job undoes the migration, and says which table."""
    url = f"sqlite:///{tmp_path / 'danlu.db'}"
    upgrade_database(url)
    engine = make_engine(url)
    dangling = (
        '    op.execute("INSERT INTO job_events (job_id, time, new, reason) '
        "VALUES ('ffffffffffff', 1, 'PENDING', 'x')\")"
    )
    config = _with_revision(tmp_path, dangling, "    pass")
    missing = r"job_events row \d+ refers to a missing jobs row"
    with pytest.raises(CommandError, match=missing), engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "9001")
    assert current_revision(engine) == head_revision()
    assert _counts(engine)["job_events"] == 0
    engine.dispose()


def test_the_connections_keep_their_foreign_keys_after_a_migration(tmp_path: Path) -> None:
    """The connection a migration ran on goes back to the pool with foreign keys on, and
    the transaction it was handed over in is still open for the caller."""
    engine = make_engine(f"sqlite:///{tmp_path / 'danlu.db'}")
    upgrade_database(engine)
    with engine.begin() as conn:
        migrated = conn.connection.driver_connection
        assert isinstance(migrated, sqlite3.Connection)
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
        config = alembic_config()
        config.attributes["connection"] = conn
        command.downgrade(config, "0007")
        assert conn.in_transaction() and migrated.in_transaction
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
    upgrade_database(engine)
    with engine.connect() as conn:
        assert conn.connection.driver_connection is migrated  # the pool's one connection
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
    engine.dispose()
