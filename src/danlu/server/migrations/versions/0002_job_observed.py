"""Jobs: the last measurement from their metric reports (``observed``) and its counter
(``observed_version``), read by the scheduler's adapter.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("observed", sa.JSON(), nullable=True))
        batch.add_column(
            sa.Column("observed_version", sa.Integer(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("observed_version")
        batch.drop_column("observed")
