"""Nodes: the end of a maintenance window (``danlu drain NODE --until TIME``): ``open_at``,
when the node's cordon or drain ends (the reconcile loop uncordons it then), and
``close_until``, the end of the cordon or drain scheduled for ``close_at`` (its ``open_at``
once it takes effect). Null for every node stored before: its cordon lasts until uncordoned,
as it did.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ADD COLUMNs, as 0036's (no batch copy of the table on SQLite)
    op.add_column("nodes", sa.Column("open_at", sa.Double(), nullable=True))
    op.add_column("nodes", sa.Column("close_until", sa.Double(), nullable=True))


def downgrade() -> None:
    # plain DROP COLUMNs (SQLite >= 3.35, PostgreSQL), as 0018's
    for column in ("close_until", "open_at"):
        op.execute(f"ALTER TABLE nodes DROP COLUMN {column}")
