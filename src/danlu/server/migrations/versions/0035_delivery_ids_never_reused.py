"""Webhook deliveries: ids never handed out twice on SQLite. The id is the
``X-Danlu-Delivery`` header an endpoint drops repeats by, but an ``INTEGER PRIMARY KEY``
without ``AUTOINCREMENT`` takes the largest id in the table plus one: after the done
deliveries were purged (or the webhook holding the newest was removed), a new message got an
id seen before, and an endpoint dropped it as a repeat. The table is rebuilt with
``AUTOINCREMENT`` (a batch copy: rows and ids kept; SQLite's ``sqlite_sequence`` starts
at the largest id kept). PostgreSQL's sequences never hand out an id twice: nothing to do
there.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None

TABLE = "webhook_deliveries"


def _rebuild(autoincrement: bool) -> None:
    """Recreate the table on SQLite with ``AUTOINCREMENT`` on its id, or without."""
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table(
        TABLE, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
    ):
        pass


def upgrade() -> None:
    _rebuild(autoincrement=True)


def downgrade() -> None:
    _rebuild(autoincrement=False)
