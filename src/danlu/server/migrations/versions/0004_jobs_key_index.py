"""Jobs: the (state, seq) index also holds the columns of a snapshot's key rows, so that the
scheduling round reads them from the index alone (a covering index: no table lookups).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

KEY_COLUMNS = [
    "state",
    "seq",
    "next_attempt_at",
    "id",
    "version",
    "observed_version",
    "priority",
    "project_id",
]


def upgrade() -> None:
    op.create_index("ix_jobs_state_seq_key", "jobs", KEY_COLUMNS)
    op.drop_index("ix_jobs_state_seq", table_name="jobs")


def downgrade() -> None:
    op.create_index("ix_jobs_state_seq", "jobs", ["state", "seq"])
    op.drop_index("ix_jobs_state_seq_key", table_name="jobs")
