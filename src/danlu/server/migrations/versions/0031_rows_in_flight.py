"""Job events and metric records, on PostgreSQL: a transaction about to insert its first row
into ``job_events`` (``job_metrics``) takes a shared advisory lock named after the highest id
of that table handed out so far, held until it ends; the feeds read those locks to return no
row above an id an open transaction may still commit
(:func:`danlu.server.services.settled.settled_id`). SQLite: nothing (one writer at a time,
so ids commit in order).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

TAGS = {"job_events": 0x646C, "job_metrics": 0x646D}
"""The top 16 bits of each table's lock key (``tag << 48 | the highest id handed out``);
kept equal to :data:`danlu.server.services.settled.TAGS` (a migration imports no app
code)."""

FUNCTION = """
CREATE FUNCTION danlu_rows_in_flight() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    handed_out bigint;
BEGIN
    IF current_setting('danlu.in_flight_' || TG_TABLE_NAME, true) IS DISTINCT FROM 'on' THEN
        EXECUTE format(
            'SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM %I',
            TG_TABLE_NAME || '_id_seq'
        ) INTO handed_out;
        PERFORM pg_advisory_xact_lock_shared((TG_ARGV[0]::bigint << 48) | handed_out);
        PERFORM set_config('danlu.in_flight_' || TG_TABLE_NAME, 'on', true);
    END IF;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(FUNCTION)
    for table, tag in TAGS.items():
        op.execute(
            f"CREATE TRIGGER {table}_in_flight BEFORE INSERT ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION danlu_rows_in_flight('{tag}')"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TAGS:
        op.execute(f"DROP TRIGGER {table}_in_flight ON {table}")
    op.execute("DROP FUNCTION danlu_rows_in_flight()")
