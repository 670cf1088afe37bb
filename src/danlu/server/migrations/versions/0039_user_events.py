"""User events: one user's history (``user_events``: created, changed, disabled, enabled,
tokens issued and revoked), read by ``GET /users/{name}/events`` and ``danlu user show``.

The users stored before start theirs with what their rows tell: a ``created`` event at
``created_at`` (by no one named: who made them was not recorded), and for a disabled one a
``disabled`` event at ``disabled_at`` by ``disabled_by`` with ``disable_reason``, oldest
first. A downgrade drops the table (and so the history).

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-12
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0039"
down_revision = "0038"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

_KNOWN = """
INSERT INTO user_events (user_id, "time", kind, actor, detail)
SELECT user_id, "time", kind, actor, detail FROM (
    SELECT id AS user_id, created_at AS "time", 'created' AS kind,
           CAST(NULL AS VARCHAR(64)) AS actor, 'role ' || role AS detail, 0 AS step
    FROM users
    UNION ALL
    SELECT id, disabled_at, 'disabled', disabled_by, COALESCE(disable_reason, ''), 1
    FROM users WHERE disabled_at IS NOT NULL
) AS known
ORDER BY "time", user_id, step
"""
"""The events the users' rows tell of, oldest first (ids in that order)."""


def upgrade() -> None:
    op.create_table(
        "user_events",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("user_id", BigId, nullable=False),
        sa.Column("time", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_user_events_user_id_users", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_user_events"),
    )
    op.create_index("ix_user_events_user_id", "user_events", ["user_id"])
    op.execute(_KNOWN)


def downgrade() -> None:
    op.drop_index("ix_user_events_user_id", table_name="user_events")
    op.drop_table("user_events")
