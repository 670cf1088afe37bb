"""GPUs: a partial index on ``cordoned_at`` (the GPUs closed on their own), which every
scheduling round reads: a few rows of thousands.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    closed = sa.text("cordoned_at IS NOT NULL")
    op.create_index(
        "ix_gpus_cordoned_at",
        "gpus",
        ["cordoned_at"],
        sqlite_where=closed,
        postgresql_where=closed,
    )


def downgrade() -> None:
    op.drop_index("ix_gpus_cordoned_at", table_name="gpus")
