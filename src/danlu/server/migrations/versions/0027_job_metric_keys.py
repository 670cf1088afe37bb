"""Metric keys: the ``Idempotency-Key`` of each metrics POST a job stored, with the number of
records it stored (``job_metric_keys``), so that a request sent again with its key (one whose
reply danlu.train's reporter did not get) is answered the same and stores nothing. Unique
per job; kept a day, and deleted with the job's records by the retention.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "job_metric_keys",
        sa.Column("id", key, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_metric_keys_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_metric_keys")),
        sa.UniqueConstraint("job_id", "key", name=op.f("uq_job_metric_keys_job_id_key")),
    )
    op.create_index(
        "ix_job_metric_keys_job_id_created_at", "job_metric_keys", ["job_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_job_metric_keys_job_id_created_at", table_name="job_metric_keys")
    op.drop_table("job_metric_keys")
