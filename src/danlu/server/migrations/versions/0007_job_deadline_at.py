"""Jobs: when a job with a ``deadline`` in its spec must have finished (``deadline_at``,
its submission time plus the deadline), indexed by state for the reconcile loop. Jobs not finished
yet get theirs from their stored spec.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29
"""

from __future__ import annotations

import json
import math

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("deadline_at", sa.Double(), nullable=True))
        batch.create_index("ix_jobs_state_deadline_at", ["state", "deadline_at"])
    bind = op.get_bind()
    rows = bind.execute(
        sa.text("SELECT seq, spec, submitted_at FROM jobs WHERE state NOT IN :done").bindparams(
            sa.bindparam("done", expanding=True)
        ),
        {"done": list(_FINISHED)},
    ).all()
    for seq, spec, submitted_at in rows:
        data = json.loads(spec) if isinstance(spec, str | bytes) else spec
        deadline = data.get("deadline") if isinstance(data, dict) else None
        if isinstance(deadline, int | float) and not isinstance(deadline, bool):
            at = float(submitted_at) + float(deadline)
            if math.isfinite(at):
                bind.execute(
                    sa.text("UPDATE jobs SET deadline_at = :at WHERE seq = :seq"),
                    {"at": at, "seq": seq},
                )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_state_deadline_at")
        batch.drop_column("deadline_at")
