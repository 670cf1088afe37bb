"""Users: ``disabled_by``, the admin who disabled the user, and ``disable_reason``, why
(``danlu user disable NAME --reason TEXT``). Null for every user stored before, and for an
enabled one: a user disabled before reads as disabled by no one named, for no reason given.

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ADD COLUMNs, as 0036's (no batch copy of the table on SQLite)
    op.add_column("users", sa.Column("disabled_by", sa.String(64), nullable=True))
    op.add_column("users", sa.Column("disable_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    # plain DROP COLUMNs (SQLite >= 3.35, PostgreSQL), as 0037's
    for column in ("disable_reason", "disabled_by"):
        op.execute(f"ALTER TABLE users DROP COLUMN {column}")
