"""Metric rollback generations: each record keeps the rollback generation of its attempt
(``job_metrics.rollback``: danlu.train rolled back in process to a checkpoint and redid the
steps after it; the replay's records say 1, after a second rollback 2, ...), so that the
first try's records of the steps redone are hidden from the job's metric list as those of
an earlier attempt are. Records stored before keep a null generation (read as 0). The index
on (job, rollback, attempt, step) finds the first step of each generation by seeks.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN, as 0029's (no batch copy of the table)
    op.add_column("job_metrics", sa.Column("rollback", sa.Integer(), nullable=True))
    op.create_index(
        "ix_job_metrics_job_id_rollback",
        "job_metrics",
        ["job_id", "rollback", "attempt", "step"],
    )


def downgrade() -> None:
    op.drop_index("ix_job_metrics_job_id_rollback", table_name="job_metrics")
    op.drop_column("job_metrics", "rollback")
