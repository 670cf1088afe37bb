"""Jobs: held by their owner or an admin (``held_at``: the scheduler passes a held job by
until it is released), in the covering index of the snapshot's key rows, whose pending
query now skips held jobs.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

OLD_KEY_COLUMNS = ["state", "seq", "next_attempt_at", "version", "observed_version", "project_id"]
KEY_COLUMNS = [*OLD_KEY_COLUMNS, "held_at"]


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("held_at", sa.Double(), nullable=True))
    op.drop_index("ix_jobs_state_seq_key", table_name="jobs")
    op.create_index("ix_jobs_state_seq_key", "jobs", KEY_COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_jobs_state_seq_key", table_name="jobs")
    op.create_index("ix_jobs_state_seq_key", "jobs", OLD_KEY_COLUMNS)
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("held_at")
