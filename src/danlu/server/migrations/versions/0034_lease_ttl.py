"""Leases: the TTL of each holder's lease (``ttl``, seconds), written when it is taken, so
that a plane watching another's lease judges it by the holder's own TTL (its
``DANLU_INTERVAL``), not the watcher's: a standby of a shorter interval took a live holder's
lease for dead. Rows written before keep a null TTL (the watcher's own stands in).

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN, as 0033's (no batch copy of the table)
    op.add_column("leases", sa.Column("ttl", sa.Double(), nullable=True))


def downgrade() -> None:
    op.drop_column("leases", "ttl")
