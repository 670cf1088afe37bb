"""Nodes: a cordon or drain scheduled for later (``close_at``, ``close_drain``,
``close_reason``): the reconcile loop applies it when the time comes. No node stored before
has one.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("close_at", sa.Double(), nullable=True))
    op.add_column(
        "nodes",
        sa.Column("close_drain", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column("nodes", sa.Column("close_reason", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    # plain DROP COLUMNs (SQLite >= 3.35, PostgreSQL): batch mode would copy the table
    for column in ("close_reason", "close_drain", "close_at"):
        op.execute(f"ALTER TABLE nodes DROP COLUMN {column}")
