"""Job runs: each stretch of a job on its GPUs, written when it ends, for the usage report
(GPU-hours by project and user over any period). Stretches that ended before this revision
are not known: the report counts from it on.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_runs",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column(
            "project_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("user_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("ended_at", sa.Double(), nullable=False),
        sa.Column("gpu_milli", sa.BigInteger(), nullable=False),
        sa.Column("gpu_memory", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_runs_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_job_runs_project_id_projects")
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_job_runs_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_runs")),
    )
    op.create_index(op.f("ix_job_runs_job_id"), "job_runs", ["job_id"])
    op.create_index("ix_job_runs_ended_at", "job_runs", ["ended_at"])


def downgrade() -> None:
    op.drop_index("ix_job_runs_ended_at", table_name="job_runs")
    op.drop_index(op.f("ix_job_runs_job_id"), table_name="job_runs")
    op.drop_table("job_runs")
