"""Metric attempts: each record remembers the job's attempt whose run reported it
(``job_metrics.attempt``), so that the records a restarted run went back over (it resumed
from an earlier checkpoint and reported those steps again) are hidden from the job's metric
list. Records stored before keep a null attempt (read as attempt 0). The index on (job,
attempt, step) finds the first step of each attempt by seeks.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN (SQLite has it): no batch copy of the table, which would reflect the
    # jobs table its rows refer to and skip that table's expression index
    op.add_column("job_metrics", sa.Column("attempt", sa.Integer(), nullable=True))
    op.create_index(
        "ix_job_metrics_job_id_attempt_step", "job_metrics", ["job_id", "attempt", "step"]
    )


def downgrade() -> None:
    op.drop_index("ix_job_metrics_job_id_attempt_step", table_name="job_metrics")
    op.drop_column("job_metrics", "attempt")  # SQLite 3.35 and later drop a column in place
