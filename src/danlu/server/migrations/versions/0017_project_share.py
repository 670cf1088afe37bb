"""Projects: ``share``, the weight of a project in the fair-share policy (1 for every project
stored before: equal shares, as that policy gave them until now).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "projects", sa.Column("share", sa.Double(), nullable=False, server_default=sa.text("1"))
    )


def downgrade() -> None:
    # a plain DROP COLUMN (SQLite >= 3.35, PostgreSQL): batch mode would copy the table,
    # which jobs, runs and webhooks reference
    op.execute("ALTER TABLE projects DROP COLUMN share")
