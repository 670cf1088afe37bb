"""Job events: an index on ``time``, for the cluster-wide feed read from a time on
(``GET /events?since=``, ``danlu events --since 1h``).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_job_events_time", "job_events", ["time"])


def downgrade() -> None:
    op.drop_index("ix_job_events_time", table_name="job_events")
