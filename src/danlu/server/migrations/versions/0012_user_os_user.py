"""Users: the OS account their jobs run as with ``DANLU_RUN_AS=user`` (``os_user``; null: the
account named like the user).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("os_user", sa.String(length=32), nullable=True))


def downgrade() -> None:
    # a plain DROP COLUMN (SQLite >= 3.35, PostgreSQL): batch mode would copy the users table,
    # which the jobs and tokens reference
    op.execute("ALTER TABLE users DROP COLUMN os_user")
