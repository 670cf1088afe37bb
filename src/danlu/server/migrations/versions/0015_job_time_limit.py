"""Jobs: the spec's ``time_limit`` (seconds the job may hold GPUs over all its runs), indexed
by state for the reconcile loop's check. No job stored before has one: the spec refused the
field until now.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("time_limit", sa.Double(), nullable=True))
    op.create_index("ix_jobs_state_time_limit", "jobs", ["state", "time_limit"])


def downgrade() -> None:
    op.drop_index("ix_jobs_state_time_limit", table_name="jobs")
    # a plain DROP COLUMN (SQLite >= 3.35, PostgreSQL): batch mode would copy the jobs table,
    # which the events, metrics and runs reference
    op.execute("ALTER TABLE jobs DROP COLUMN time_limit")
