"""Users: a GPU quota of the user's own (``quota_gpus``, whole-GPU equivalents held by the
user's running jobs in all projects). No user stored before has one.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("quota_gpus", sa.Double(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE users DROP COLUMN quota_gpus")
