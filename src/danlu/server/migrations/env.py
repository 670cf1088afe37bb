"""Alembic environment: runs on the connection handed over by ``upgrade_database``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from danlu.core.errors import ConfigError
from danlu.server.db.engine import make_engine
from danlu.server.db.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through ``config.attributes['connection']`` or a new engine for the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise ConfigError("no database URL or connection given to the migration environment")
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise ConfigError("danlu migrations run online only (upgrade_database)")
run_migrations_online()
