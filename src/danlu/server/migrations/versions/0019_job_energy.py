"""Energy: each job's total (``jobs.energy``, joules) and the energy of each stretch of a
job on its GPUs (``job_energy``), which the control plane's energy meter adds to while the
stretch runs. Jobs stored before have none (null): nothing metered them.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("energy", sa.Double(), nullable=True))
    key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "job_energy",
        sa.Column("id", key, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("project_id", key, nullable=False),
        sa.Column("user_id", key, nullable=False),
        sa.Column("run_start", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Column("joules", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_energy_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_job_energy_project_id_projects")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_job_energy_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_energy")),
        sa.UniqueConstraint("job_id", "run_start", name=op.f("uq_job_energy_job_id_run_start")),
    )
    op.create_index("ix_job_energy_updated_at", "job_energy", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_job_energy_updated_at", table_name="job_energy")
    op.drop_table("job_energy")
    op.execute("ALTER TABLE jobs DROP COLUMN energy")
