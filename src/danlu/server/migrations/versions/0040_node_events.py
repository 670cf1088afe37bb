"""Node events: one node's history (``node_events``: joined, lost, back, GPUs changed,
cordoned, drained, scheduled, uncordoned), read by ``GET /cluster/nodes/{name}/events`` and
``danlu node show``.

The nodes stored before start theirs at the upgrade: a node the last reading of the
inventory listed with a ``joined`` event (``in the inventory when its history began``, its
GPUs), one kept only for what an admin set on it while it is missing (position -1) with a
``lost`` event, so that its return is told as ``back``. Neither names anyone (the control
plane's), and both are timed at the upgrade: when a node first came, or left, was not
recorded. A cordon in force stays on the node's row (``cordoned_at``, ``cordon_reason``);
who made it was not recorded either. A downgrade drops the table (and so the history).

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-14
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0040"
down_revision = "0039"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

_KNOWN = """
INSERT INTO node_events (node, "time", kind, actor, detail)
SELECT n.name, :now,
       CASE WHEN n.position = -1 THEN 'lost' ELSE 'joined' END,
       CAST(NULL AS VARCHAR(64)),
       CASE WHEN n.position = -1
            THEN 'not in the inventory when its history began'
            ELSE 'in the inventory when its history began: '
                 || CAST((SELECT COUNT(*) FROM gpus g WHERE g.node_id = n.id AND g.memory <> -1)
                         AS VARCHAR(20))
                 || 'x ' || n.gpu_type
       END
FROM nodes n
ORDER BY n.position, n.id
"""
"""The events the nodes' rows tell of, in the inventory's order (those missing first)."""


def upgrade() -> None:
    op.create_table(
        "node_events",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("time", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_node_events"),
    )
    op.create_index("ix_node_events_node_id", "node_events", ["node", "id"])
    op.get_bind().execute(sa.text(_KNOWN), {"now": time.time()})


def downgrade() -> None:
    op.drop_index("ix_node_events_node_id", table_name="node_events")
    op.drop_table("node_events")
