"""The inventory's revision counter (table ``counters``, row ``inventory``), and the jobs' key-row
index without the columns the snapshot no longer reads (``id``, ``priority``).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

KEY_COLUMNS = ["state", "seq", "next_attempt_at", "version", "observed_version", "project_id"]
OLD_KEY_COLUMNS = [
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
    counters = op.create_table(
        "counters",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(counters, [{"name": "inventory", "value": 0}])
    op.drop_index("ix_jobs_state_seq_key", table_name="jobs")
    op.create_index("ix_jobs_state_seq_key", "jobs", KEY_COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_jobs_state_seq_key", table_name="jobs")
    op.create_index("ix_jobs_state_seq_key", "jobs", OLD_KEY_COLUMNS)
    op.drop_table("counters")
