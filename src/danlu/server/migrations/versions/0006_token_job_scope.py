"""API tokens: the job whose run a token was issued to (``job_id``); such a token may only
report that job's metrics.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("job_id", sa.String(32), nullable=True))
        batch.create_index("ix_api_tokens_job_id", ["job_id"])


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_index("ix_api_tokens_job_id")
        batch.drop_column("job_id")
