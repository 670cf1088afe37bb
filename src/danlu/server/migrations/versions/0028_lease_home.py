"""Leases: the control plane that last held each (``home``: its home, and its host for the
local executor), kept when it is given back, so that a plane of another home refuses a
database whose running jobs' runs it cannot see rather than relaunching them.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("home", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("home")
