"""Launched attempts: each job remembers the latest attempt whose launch the executor took
(``jobs.launched_attempt``), so that a run the executor no longer knows is told from one
that never launched. Jobs stored before keep a null (read as "never launched", as before).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN (SQLite has it): no batch copy of the jobs table, which would skip
    # its expression index and delete the rows that refer to it
    op.add_column("jobs", sa.Column("launched_attempt", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "launched_attempt")  # SQLite 3.35 and later drop a column in place
