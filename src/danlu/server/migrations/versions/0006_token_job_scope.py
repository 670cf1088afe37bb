"""API tokens: the job whose run a token was issued to (``job_id``); such a token may only
report that job's metrics. The tokens the control plane issued to runs before (named
``job <id>#<attempt>``, of the job's own user) are scoped to their job here.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


_RUN_TOKEN = re.compile(r"^job ([0-9a-f]{12})#[0-9]+$")


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("job_id", sa.String(32), nullable=True))
        batch.create_index("ix_api_tokens_job_id", ["job_id"])
    bind = op.get_bind()
    owners: dict[str, int] = {
        str(job_id): int(user_id)
        for job_id, user_id in bind.execute(sa.text("SELECT id, user_id FROM jobs")).all()
    }
    for token_id, user_id, name in bind.execute(
        sa.text("SELECT id, user_id, name FROM api_tokens WHERE name LIKE 'job %'")
    ).all():
        match = _RUN_TOKEN.match(name or "")
        if match and owners.get(match.group(1)) == user_id:
            bind.execute(
                sa.text("UPDATE api_tokens SET job_id = :job WHERE id = :id"),
                {"job": match.group(1), "id": token_id},
            )


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_index("ix_api_tokens_job_id")
        batch.drop_column("job_id")
