"""GPUs: one GPU closed to new work on its own (``cordoned_at``, ``cordon_reason``,
``draining``), by an operator (``danlu cordon NODE --gpu N``) or by the GPU health check. No
GPU stored before is closed.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("gpus", sa.Column("cordoned_at", sa.Double(), nullable=True))
    op.add_column("gpus", sa.Column("cordon_reason", sa.Text(), nullable=False, server_default=""))
    op.add_column(
        "gpus", sa.Column("draining", sa.Boolean(), nullable=False, server_default=sa.false())
    )


def downgrade() -> None:
    # plain DROP COLUMNs (SQLite >= 3.35, PostgreSQL): batch mode would copy the table
    for column in ("draining", "cordon_reason", "cordoned_at"):
        op.execute(f"ALTER TABLE gpus DROP COLUMN {column}")
