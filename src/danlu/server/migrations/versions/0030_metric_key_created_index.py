"""Metric request keys: an index on ``created_at``, for the retention pass that deletes the
keys of every job once they are a day old (a finished job's last keys stayed for good).

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_job_metric_keys_created_at", "job_metric_keys", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_job_metric_keys_created_at", table_name="job_metric_keys")
