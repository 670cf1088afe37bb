"""Jobs: when the retention deleted a finished job's metrics, logs and checkpoints
(``purged_at``), indexed with ``finished_at`` for the purge's oldest-first query.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("purged_at", sa.Double(), nullable=True))
        batch.create_index("ix_jobs_purged_at_finished_at", ["purged_at", "finished_at"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_purged_at_finished_at")
        batch.drop_column("purged_at")
