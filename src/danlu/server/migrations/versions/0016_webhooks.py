"""Webhooks: HTTP endpoints told of job state changes (``webhooks``), and their outbox
(``webhook_deliveries``: one row per message, written in the transaction of the change,
claimed and posted by the sender with the row-lock columns).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("seq", BigId, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("states", sa.JSON(), nullable=False),
        sa.Column("project_id", BigId, nullable=True),
        sa.Column("user_id", BigId, nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name="fk_webhooks_project_id_projects"
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_webhooks_user_id_users"),
        sa.PrimaryKeyConstraint("seq", name="pk_webhooks"),
        sa.UniqueConstraint("id", name="uq_webhooks_id"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("webhook_seq", BigId, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.Double(), nullable=False),
        sa.Column("done_at", sa.Double(), nullable=True),
        sa.Column("delivered", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("lock_token", sa.String(length=64), nullable=True),
        sa.Column("lock_expires_at", sa.Double(), nullable=True),
        sa.Column("lock_owner", sa.String(length=100), nullable=True),
        sa.ForeignKeyConstraint(
            ["webhook_seq"],
            ["webhooks.seq"],
            name="fk_webhook_deliveries_webhook_seq_webhooks",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
    )
    op.create_index("ix_webhook_deliveries_webhook_seq", "webhook_deliveries", ["webhook_seq"])
    op.create_index(
        "ix_webhook_deliveries_done_at_next_attempt_at",
        "webhook_deliveries",
        ["done_at", "next_attempt_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_done_at_next_attempt_at", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_webhook_seq", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhooks")
