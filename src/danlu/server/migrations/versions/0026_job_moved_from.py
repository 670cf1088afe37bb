"""Jobs: the attempt of the run a move left (``moved_from``), whose exit within its
preemption grace the launch of the job's new run judges: an old run that finished the
job's work ends it SUCCEEDED, one that failed counts as a failure of the job's run. A job
moved before this revision has none: its old run is not judged, as before.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("moved_from", sa.Integer(), nullable=True))


def downgrade() -> None:
    # a plain DROP COLUMN (SQLite >= 3.35, PostgreSQL): batch mode would copy the jobs table,
    # which the events, metrics and runs reference
    op.execute("ALTER TABLE jobs DROP COLUMN moved_from")
