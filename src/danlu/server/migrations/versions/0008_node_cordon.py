"""Nodes: closed to new work (``cordoned_at``, with the reason), a drain asked for (the
jobs there are preempted by checkpoint), and the node's launch failures in a row.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("cordoned_at", sa.Double(), nullable=True))
        batch.add_column(sa.Column("cordon_reason", sa.Text(), nullable=False, server_default=""))
        batch.add_column(
            sa.Column("draining", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(
            sa.Column("launch_failures", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("launch_failures")
        batch.drop_column("draining")
        batch.drop_column("cordon_reason")
        batch.drop_column("cordoned_at")
