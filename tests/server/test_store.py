"""The store: migrations match the models, engine settings, settings from the environment."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Executable, inspect, text

from danlu.config import check_fake_gpus, load_settings
from danlu.core.errors import ConfigError
from danlu.core.units import GiB
from danlu.server.db import Database, current_revision, head_revision, upgrade_database
from danlu.server.db.migrate import alembic_config
from danlu.server.db.models import Base
from danlu.server.services import record, view

EXPRESSION_INDEX_NOT_COMPARED = (
    # SQLite's reflection skips an index on an expression, and autogenerate says it does
    "ignore:Skipped unsupported reflection of expression-based index:sqlalchemy.exc.SAWarning",
    "ignore:autogenerate skipping metadata-specified expression-based index:UserWarning",
)


@pytest.mark.filterwarnings(*EXPRESSION_INDEX_NOT_COMPARED)
def test_migrations_create_exactly_the_models(db: Database) -> None:
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        # the one index on an expression, which autogenerate compares on PostgreSQL only
        if db.engine.dialect.name == "sqlite":
            found = "SELECT sql FROM sqlite_master WHERE name = 'ix_jobs_state_reason_prefix'"
        else:
            found = (
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_jobs_state_reason_prefix'"
            )
        definition = conn.exec_driver_sql(found).scalar_one()
    assert diff == []
    assert "substr(pending_reason, 1, 200)" in definition.replace(
        "(pending_reason)::text", "pending_reason"
    )
    assert current_revision(db.engine) == head_revision()
    tables = set(inspect(db.engine).get_table_names())
    assert {"users", "api_tokens", "projects", "jobs", "job_events", "job_metrics"} <= tables


def test_upgrade_is_idempotent(db_url: str) -> None:
    upgrade_database(db_url)
    upgrade_database(db_url)
    db = Database(db_url)
    assert current_revision(db.engine) == head_revision()
    db.dispose()


@pytest.mark.filterwarnings(*EXPRESSION_INDEX_NOT_COMPARED)
def test_the_observed_columns_migrate_down_and_up(db_url: str) -> None:
    db = Database(db_url)
    try:

        def columns() -> set[str]:
            return {c["name"] for c in inspect(db.engine).get_columns("jobs")}

        assert {"observed", "observed_version"} <= columns()
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0001")
        assert not {"observed", "observed_version"} & columns()
        assert current_revision(db.engine) == "0001"
    finally:
        upgrade_database(db.engine)  # the PostgreSQL template is shared: leave it at head
    assert {"observed", "observed_version"} <= columns()
    with db.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    db.dispose()


def test_tokens_issued_to_runs_are_scoped_to_their_job_on_upgrade(db_url: str) -> None:
    """Migration 0006 scopes the tokens the control plane issued to runs before it (named
    ``job <id>#<attempt>``, of the job's own user); a user's own tokens stay as they were."""
    from danlu.core.cluster import Node
    from danlu.core.spec import parse_spec
    from danlu.server.services import cluster, jobs, users

    db = Database(db_url)
    try:
        with db.session() as s:
            alice = users.create_user(s, "alice")
            users.create_user(s, "bob")
            cluster.replace_inventory(s, [Node("n", 1)])
            job = jobs.submit(s, parse_spec({"name": "j", "command": ["true"]}), alice)
            ids = {"alice": alice.id, "bob": users.get_user(s, "bob").id, "job": job.id}
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0005")
        rows = [
            ("alice", f"job {ids['job']}#1"),  # a run's token: scoped
            ("bob", f"job {ids['job']}#2"),  # not the job's user: kept as it was
            ("alice", "job fffffffffff0#1"),  # no such job: kept
            ("alice", "laptop"),
        ]
        with db.engine.begin() as conn:
            for i, (user, name) in enumerate(rows):
                conn.execute(
                    text(
                        "INSERT INTO api_tokens (user_id, name, prefix, token_hash, created_at) "
                        "VALUES (:u, :n, :p, :h, 0)"
                    ),
                    {"u": ids[user], "n": name, "p": f"p{i}", "h": f"h{i}"},
                )
    finally:
        upgrade_database(db.engine)
    with db.engine.connect() as conn:
        scoped = dict(conn.execute(text("SELECT name, job_id FROM api_tokens")).all())
    assert scoped == {
        f"job {ids['job']}#1": ids["job"],
        f"job {ids['job']}#2": None,
        "job fffffffffff0#1": None,
        "laptop": None,
    }
    db.dispose()


def test_unfinished_jobs_get_their_deadline_on_upgrade(db_url: str) -> None:
    """Migration 0007 gives the jobs not finished yet ``deadline_at`` from their stored
    spec's ``deadline``; finished ones and those without one keep null."""
    from danlu.core.cluster import Node
    from danlu.server.services import cluster, jobs, users

    db = Database(db_url)
    try:
        with db.session() as s:
            alice = users.create_user(s, "alice")
            cluster.replace_inventory(s, [Node("n", 1)])
            body = {"command": ["true"]}
            due = jobs.submit(s, {"name": "due", "deadline": 60, **body}, alice, now=1000.0)
            done = jobs.submit(s, {"name": "done", "deadline": 60, **body}, alice, now=1000.0)
            free = jobs.submit(s, {"name": "free", **body}, alice, now=1000.0)
            jobs.cancel_job(s, done.id, now=1001.0)
            ids = (due.id, done.id, free.id)
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0006")
    finally:
        upgrade_database(db.engine)
    with db.engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT id, deadline_at FROM jobs")).all())
    assert [rows[i] for i in ids] == [1060.0, None, None]
    db.dispose()


def test_nodes_are_ready_after_the_cordon_migration(db_url: str) -> None:
    """Migration 0008: the nodes of a store made before it are ready (not cordoned, no
    drain, no launch failures), and a downgrade past it drops the columns again."""
    from danlu.core.cluster import Node
    from danlu.server.services import cluster, nodes

    db = Database(db_url)
    try:
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0007")
        with db.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO nodes (name, position, gpu_type, rack, cpu_milli, memory, fake,"
                    " updated_at) VALUES ('old', 0, 'generic', 'rack-0', 0, 0, false, 1.0)"
                )
            )
    finally:
        upgrade_database(db.engine)
    with db.session() as s:
        (old,) = cluster.list_nodes(s)
        assert (nodes.state(old), old.cordon_reason, old.launch_failures) == ("ready", "", 0)
        cluster.replace_inventory(s, [Node("old", 1)])
        nodes.cordon(s, "old", "fan", now=5.0)
    with db.session() as s:  # an inventory refresh keeps the node's state
        cluster.replace_inventory(s, [Node("old", 2), Node("new", 1)])
        states = {n.name: nodes.state(n) for n in cluster.list_nodes(s)}
        assert states == {"old": "cordoned", "new": "ready"}
    db.dispose()


def test_fresh_sqlite_file_is_created_and_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/home/sub/danlu.db"
    upgrade_database(url)
    db = Database(url)
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    db.dispose()
    assert (tmp_path / "home" / "sub" / "danlu.db").exists()


def test_foreign_keys_are_enforced(db: Database) -> None:
    with pytest.raises(Exception, match=r"(?i)foreign key"), db.session() as s:
        s.execute(
            text(
                "INSERT INTO job_events (job_id, time, old, new, reason) "
                "VALUES ('nope', 0, NULL, 'PENDING', '')"
            )
        )


def test_read_session_does_not_write(db: Database) -> None:
    with db.read_session() as s:
        assert s.execute(text("SELECT 1")).scalar() == 1


def test_settings_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "HOME",
        "DATABASE_URL",
        "POLICY",
        "POLICY_OPTIONS",
        "INTERVAL",
        "FAKE_GPUS",
        "PORT",
    ):
        monkeypatch.delenv(f"DANLU_{name}", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = load_settings()
    assert settings.home == tmp_path / ".danlu"
    assert settings.db_url == f"sqlite:///{tmp_path}/.danlu/danlu.db"
    assert (settings.policy, settings.interval, settings.port) == ("priority", 2.0, 8470)
    assert settings.fake_groups is None
    assert settings.policy_knobs == {}
    assert settings.admin_token_path == tmp_path / ".danlu" / "admin.token"


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DANLU_HOME", str(tmp_path))
    monkeypatch.setenv("DANLU_DATABASE_URL", "postgresql://u:p@db:5432/danlu")
    monkeypatch.setenv("DANLU_FAKE_GPUS", "4x80GiB")
    monkeypatch.setenv("DANLU_INTERVAL", "0.5")
    monkeypatch.setenv("DANLU_PORT", "9000")
    monkeypatch.setenv("DANLU_POLICY_OPTIONS", '{"min_hold": 300, "thresholds": [1, 2]}')
    settings = load_settings()
    assert settings.policy_knobs == {"min_hold": 300, "thresholds": (1, 2)}
    assert settings.db_url == "postgresql+psycopg://u:p@db:5432/danlu"
    assert settings.fake_groups is not None
    assert [(g.count, g.gpu_type.memory) for g in settings.fake_groups] == [(4, 80 * GiB)]
    assert (settings.interval, settings.port) == (0.5, 9000)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DANLU_PORT", "99999"),
        ("DANLU_INTERVAL", "0"),
        ("DANLU_INTERVAL", "inf"),
        ("DANLU_FAKE_GPUS", "lots"),
        ("DANLU_FAKE_GPUS", "1000000x80GiB"),
        ("DANLU_FAKE_GPUS", "1000x1000xH100"),
        ("DANLU_DATABASE_URL", "mysql://x/y"),
        ("DANLU_POLICY_OPTIONS", "min_hold=300"),
        ("DANLU_POLICY_OPTIONS", "[300]"),
        ("DANLU_POLICY_OPTIONS", '{"": 1}'),
        ("DANLU_EXECUTOR", "kubernetes"),
        ("DANLU_SLURM_PARTITION", "gpu,cpu"),
        ("DANLU_SLURM_GPU_TYPE", "Voodoo5"),
        ("DANLU_SLURM_SBATCH_OPTIONS", "--account=ml 'unclosed"),
        ("DANLU_SLURM_SBATCH_OPTIONS", "--qos=x script.sh"),
    ],
)
def test_settings_errors_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        load_settings()


def test_slurm_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANLU_EXECUTOR", " Slurm ")
    monkeypatch.setenv("DANLU_SLURM_PARTITION", "gpu")
    monkeypatch.setenv("DANLU_SLURM_GPU_TYPE", "h100")
    monkeypatch.setenv("DANLU_SLURM_SBATCH_OPTIONS", "--account=ml --comment='two words'")
    settings = load_settings()
    assert (settings.executor, settings.slurm_partition) == ("slurm", "gpu")
    assert settings.slurm_gpu_type == "H100"
    assert settings.sbatch_options == ("--account=ml", "--comment=two words")
    assert load_settings(executor="local").sbatch_options == ("--account=ml", "--comment=two words")


def test_fake_gpus_forms() -> None:
    assert [g.count for g in check_fake_gpus("4x80GiB")] == [4]
    two = check_fake_gpus("8xH100,8xH100")  # a group a node, as the server builds it
    assert [(g.count, g.gpu_type.name) for g in two] == [(8, "H100"), (8, "H100")]
    with pytest.raises(ConfigError, match="0x80GiB"):
        check_fake_gpus("0x80GiB")


def sqlite_plans(path: Path, statements: Iterable[Executable]) -> list[list[str]]:
    """SQLite's query plan of each statement (its literal SQL) on a new, migrated store at
    ``path``: the detail of every step."""
    url = f"sqlite:///{path}"
    upgrade_database(url)
    db = Database(url)
    try:
        with db.session() as s:
            plans = []
            for statement in statements:
                sql = str(statement.compile(db.engine, compile_kwargs={"literal_binds": True}))
                rows = s.connection().exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}").all()
                plans.append([str(row[-1]) for row in rows])
            return plans
    finally:
        db.dispose()


def test_the_snapshot_key_rows_are_read_from_the_covering_index(tmp_path: Path) -> None:
    """The round's key-row queries (held and pending jobs) never touch the jobs table."""
    for plan in sqlite_plans(tmp_path / "plan.db", view.key_row_queries(now=0.0)):
        details = " ".join(plan)
        assert "COVERING INDEX ix_jobs_state_seq_key" in details, details


def test_the_pending_jobs_off_the_shared_reason_are_found_in_the_reason_index(
    tmp_path: Path,
) -> None:
    """The round's shared waiting reason goes to the pending jobs that say otherwise, found
    as three ranges of the reason index (not by reading every pending row)."""
    statement = record.reason_differs("shorter-ranked jobs hold the GPUs")
    (plan,) = sqlite_plans(tmp_path / "plan.db", [statement])
    details = [step for step in plan if "jobs" in step]
    assert len(details) == 3, details
    ranges = ("<expr>=?", "<expr><?", "<expr>>?")  # null, below, above
    for detail, bound in zip(details, ranges, strict=True):
        assert f"INDEX ix_jobs_state_reason_prefix (state=? AND {bound})" in detail
