"""Sweeps: hyper-parameter searches run as trial jobs (``sweeps``; ``jobs.sweep_id`` and
``jobs.trial`` name a trial's sweep and number).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("seq", BigId, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("user_id", BigId, nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("submitted", sa.Integer(), nullable=False),
        sa.Column("estimate", sa.JSON(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.Column("judged_at", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_sweeps_user_id_users"),
        sa.PrimaryKeyConstraint("seq", name="pk_sweeps"),
        sa.UniqueConstraint("id", name="uq_sweeps_id"),
    )
    op.create_index("ix_sweeps_user_id", "sweeps", ["user_id"])
    op.create_index("ix_sweeps_state", "sweeps", ["state"])
    op.add_column("jobs", sa.Column("sweep_id", sa.String(length=32), nullable=True))
    op.add_column("jobs", sa.Column("trial", sa.Integer(), nullable=True))
    op.create_index("ix_jobs_sweep_id", "jobs", ["sweep_id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_sweep_id", table_name="jobs")
    # plain DROP COLUMNs (SQLite >= 3.35, PostgreSQL): batch mode would copy the jobs table,
    # which the events, runs and metrics reference
    op.execute("ALTER TABLE jobs DROP COLUMN trial")
    op.execute("ALTER TABLE jobs DROP COLUMN sweep_id")
    op.drop_index("ix_sweeps_state", table_name="sweeps")
    op.drop_index("ix_sweeps_user_id", table_name="sweeps")
    op.drop_table("sweeps")
