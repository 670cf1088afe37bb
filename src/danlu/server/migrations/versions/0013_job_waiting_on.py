"""Jobs: the dependency a job still waits for (``waiting_on``: the scheduler passes a job by
while one of the jobs it depends on has not met its condition), in the covering index of the
snapshot's key rows, whose pending query now skips waiting jobs.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

OLD_KEY_COLUMNS = [
    "state",
    "seq",
    "next_attempt_at",
    "version",
    "observed_version",
    "project_id",
    "held_at",
]
KEY_COLUMNS = [*OLD_KEY_COLUMNS, "waiting_on"]


def upgrade() -> None:
    op.add_column("jobs", sa.Column("waiting_on", sa.String(length=32), nullable=True))
    op.drop_index("ix_jobs_state_seq_key", table_name="jobs")
    op.create_index("ix_jobs_state_seq_key", "jobs", KEY_COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_jobs_state_seq_key", table_name="jobs")
    op.create_index("ix_jobs_state_seq_key", "jobs", OLD_KEY_COLUMNS)
    # a plain DROP COLUMN (SQLite >= 3.35, PostgreSQL): batch mode would copy the jobs table,
    # which the events, metrics and runs reference
    op.execute("ALTER TABLE jobs DROP COLUMN waiting_on")
