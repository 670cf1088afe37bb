"""Row locks: :func:`~danlu.server.services.common.lock_row` locks the model's
own row only. A job loads its owner and project joined (``Job.user``, ``Job.project``), and
PostgreSQL's ``FOR NO KEY UPDATE`` without ``OF`` locks the row of every table in ``FROM``:
a job's cancel, hold or priority change locked its owner's users row and its project's row
too, which a sweep's cancel (its owner's row) or a submission (the owner's row, counting
unfinished jobs) waited on or deadlocked with."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import user_and_nodes
from sqlalchemy import event, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import ORMExecuteState

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database, Job
from danlu.server.services import jobs
from danlu.server.services.common import lock_row

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))
SPEC = {"name": "t", "command": ["x"], "resources": {"gpus": 1}}


def test_a_job_s_row_lock_takes_the_job_row_only(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        job = jobs.submit(s, SPEC, alice, now=NOW)
        job_id, alice_id, project_id = job.id, alice.id, job.project_id
    statements: list[Any] = []
    with db.session() as s:

        @event.listens_for(s, "do_orm_execute")
        def _seen(state: ORMExecuteState) -> None:
            statements.append(state.statement)

        locked = lock_row(s, Job, job_id)
        assert locked.id == job_id and locked.user.id == alice_id  # still loaded joined
        locking = [
            str(stmt.compile(dialect=postgresql.dialect()))
            for stmt in statements
            if getattr(stmt, "_for_update_arg", None) is not None
        ]
        assert len(locking) == 1 and locking[0].endswith("FOR NO KEY UPDATE OF jobs"), locking
        if db.dialect != "postgresql":
            return  # SQLite renders no row lock: its writers are serialised anyway
        with db.engine.connect() as other:
            other.execute(text("SET lock_timeout = '5s'"))
            for table, key in (("users", alice_id), ("projects", project_id)):
                row = text(f"SELECT id FROM {table} WHERE id = :id FOR NO KEY UPDATE NOWAIT")
                assert other.execute(row, {"id": key}).scalar_one() == key, table
            other.rollback()
            row = text("SELECT id FROM jobs WHERE id = :id FOR NO KEY UPDATE NOWAIT")
            with pytest.raises(Exception, match="could not obtain lock"):
                other.execute(row, {"id": job_id})
            other.rollback()
