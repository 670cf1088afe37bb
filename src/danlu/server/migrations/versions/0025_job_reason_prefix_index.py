"""Jobs: an index on ``state`` and the first 200 characters of ``pending_reason``, so that
the scheduling round finds the pending jobs whose waiting reason is not the round's shared
one without reading every pending row (10,000 at scale).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_jobs_state_reason_prefix",
        "jobs",
        ["state", sa.text("substr(pending_reason, 1, 200)")],
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_state_reason_prefix", table_name="jobs")
