"""Users: ``disabled_at``, when an admin disabled the user (``danlu user disable``): its
tokens are refused and its queued jobs are not started until it is enabled again; null for
an enabled user (every user stored before).

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN, as 0034's (no batch copy of the table on SQLite)
    op.add_column("users", sa.Column("disabled_at", sa.Double(), nullable=True))


def downgrade() -> None:
    op.drop_column("users", "disabled_at")
