"""A job restarted from a checkpoint (a preemption, a crash retry, an elastic
resize: each new start is a new ``Job.attempt``) reports again the steps after that
checkpoint, and its metric list held the old run's records for those steps and the new run's
(a loss curve drawn from it zig-zags). Each record now remembers the attempt that reported
it, and the list hides by default a record when a later attempt of the job reported a step
at or below its step; ``superseded=True`` lists them too. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from alembic import command
from helpers import user_and_nodes
from sqlalchemy import event, insert, inspect, select, text, update

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database, Job, JobMetric, upgrade_database
from danlu.server.db.migrate import alembic_config
from danlu.server.services import jobs, metrics

T = 1_000_000.0


def _job(db: Database) -> str:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 1, gpu_type("H100")),), T)
        return jobs.submit(s, {"name": "m", "command": ["true"]}, alice, now=T).id


def _report(
    db: Database,
    job_id: str,
    attempt: int,
    records: list[dict[str, Any]],
    *,
    moved_from: int | None = None,
    run_token: bool = False,
) -> None:
    """``records`` stored while the job is at ``attempt`` (as a start or a move left it)."""
    with db.session() as s:
        s.execute(
            update(Job).where(Job.id == job_id).values(attempt=attempt, moved_from=moved_from)
        )
        job = s.scalars(select(Job).where(Job.id == job_id)).one()
        metrics.ingest(s, job, records, run_token=run_token)


def _steps(db: Database, job_id: str, **kwargs: Any) -> list[tuple[int, int | None, str]]:
    with db.read_session() as s:
        rows = metrics.list_metrics(s, job_id, **kwargs)
        return [(m.step, m.attempt, ",".join(sorted(m.data))) for m in rows]


def _crash_and_resume(db: Database) -> str:
    """Attempt 1 reports steps 1-8 (an eval beside the train loss at step 4 and 8) and
    crashes; attempt 2 resumes from the checkpoint of step 4 and reports 5-10 (an eval at
    8 again)."""
    job_id = _job(db)
    first = [{"step": s, "loss": 1.0 / s} for s in range(1, 9)]
    first[4:4] = [{"step": 4, "val_loss": 0.3}]
    first.append({"step": 8, "val_loss": 0.2})
    _report(db, job_id, 1, first)
    second = [{"step": s, "loss": 0.5 / s} for s in range(5, 11)]
    second[4:4] = [{"step": 8, "val_loss": 0.1}]
    _report(db, job_id, 2, second)
    return job_id


def test_the_records_a_later_attempt_went_back_over_are_hidden(db: Database) -> None:
    job_id = _crash_and_resume(db)
    shown = _steps(db, job_id)
    assert shown == [
        (1, 1, "loss"),
        (2, 1, "loss"),
        (3, 1, "loss"),
        (4, 1, "loss"),
        (4, 1, "val_loss"),  # two records at one step of one attempt: both kept
        (5, 2, "loss"),
        (6, 2, "loss"),
        (7, 2, "loss"),
        (8, 2, "loss"),
        (8, 2, "val_loss"),
        (9, 2, "loss"),
        (10, 2, "loss"),
    ]
    everything = _steps(db, job_id, superseded=True)
    assert len(everything) == 10 + 7
    assert [(s, a) for s, a, _ in everything if a == 1][-5:] == [(5, 1), (6, 1), (7, 1)] + [
        (8, 1)
    ] * 2


def test_paging_counts_only_the_records_shown(db: Database) -> None:
    job_id = _crash_and_resume(db)
    assert [s for s, _, _ in _steps(db, job_id, limit=3, tail=True)] == [8, 9, 10]
    assert [(s, a) for s, a, _ in _steps(db, job_id, after_step=4, limit=2)] == [(5, 2), (6, 2)]
    assert [(s, a) for s, a, _ in _steps(db, job_id, after_step=3, limit=3)] == [
        (4, 1),
        (4, 1),
        (5, 2),
    ]
    tail = _steps(db, job_id, limit=3, tail=True, superseded=True)
    assert [(s, a) for s, a, _ in tail] == [(8, 2), (9, 2), (10, 2)]


def test_an_attempt_that_resumed_after_the_last_record_hides_nothing(db: Database) -> None:
    job_id = _job(db)
    _report(db, job_id, 1, [{"step": s, "loss": 1.0} for s in range(1, 5)])
    _report(db, job_id, 3, [{"step": s, "loss": 1.0} for s in range(5, 8)])  # a preemption
    assert [(s, a) for s, a, _ in _steps(db, job_id)] == [(s, 1) for s in range(1, 5)] + [
        (s, 3) for s in range(5, 8)
    ]
    with db.read_session() as s:
        seen = metrics.supersession(s, job_id)
        assert not any(seen.superseded(a, step) for step, a, _ in _steps(db, job_id))


def test_every_later_attempt_counts_not_only_the_next(db: Database) -> None:
    """Attempt 1 reached step 9, attempt 2 went back to 7 and reached 8, attempt 3 went back
    to 3: what every one of them reported from step 3 on is hidden but attempt 3's."""
    job_id = _job(db)
    _report(db, job_id, 1, [{"step": s, "loss": 1.0} for s in range(1, 10)])
    _report(db, job_id, 2, [{"step": s, "loss": 2.0} for s in (7, 8)])
    _report(db, job_id, 3, [{"step": s, "loss": 3.0} for s in range(3, 6)])
    assert [(s, a) for s, a, _ in _steps(db, job_id)] == [(1, 1), (2, 1), (3, 3), (4, 3), (5, 3)]
    with db.read_session() as s:
        seen = metrics.supersession(s, job_id)
        assert seen.superseded(1, 3) and seen.superseded(2, 7) and not seen.superseded(3, 9)
        assert not seen.superseded(1, 2) and not seen.superseded(2, 2)


def test_records_stored_before_attempts_count_as_attempt_zero(db: Database) -> None:
    job_id = _job(db)
    with db.session() as s:  # as the migration leaves them: no attempt
        rows = [{"job_id": job_id, "step": s, "time": T, "data": {"loss": 1.0}} for s in (1, 2, 3)]
        s.execute(insert(JobMetric), rows)
    _report(db, job_id, 0, [{"step": 2, "note": 1}])  # a user's report before any run
    assert [(s, a) for s, a, _ in _steps(db, job_id)] == [(1, None), (2, None), (2, 0), (3, None)]
    _report(db, job_id, 1, [{"step": 2, "loss": 0.5}])
    assert [(s, a) for s, a, _ in _steps(db, job_id)] == [(1, None), (2, 1)]
    with db.read_session() as s:
        seen = metrics.supersession(s, job_id)
        assert seen.superseded(None, 3) and seen.superseded(0, 2) and not seen.superseded(None, 1)


def test_a_run_token_reports_for_the_run_a_move_left_until_the_new_run_starts(
    db: Database,
) -> None:
    """A resize moves the job to attempt 3 at once, while the run of attempt 2 (the only one
    holding a live run token: the next run's is issued at its launch) checkpoints and exits
    within its grace: what that run sends is attempt 2's. A user's token reports for the
    job's current attempt."""
    job_id = _job(db)
    _report(db, job_id, 3, [{"step": 10, "loss": 1.0}], moved_from=2, run_token=True)
    _report(db, job_id, 3, [{"step": 11, "note": 1}], moved_from=2)
    _report(db, job_id, 3, [{"step": 11, "loss": 1.0}], run_token=True)
    assert [(s, a) for s, a, _ in _steps(db, job_id, superseded=True)] == [
        (10, 2),
        (11, 3),
        (11, 3),
    ]


def test_the_attempts_are_found_through_the_index(sqlite_db: Database) -> None:
    """The first step of each attempt is read by index seeks (a loose index scan), not by a
    scan of the job's records: a job holds hundreds of thousands of them."""
    job_id = _job(sqlite_db)
    _report(sqlite_db, job_id, 1, [{"step": 1, "loss": 1.0}])
    _report(sqlite_db, job_id, 2, [{"step": 1, "loss": 1.0, "rollback": 1}])
    statements: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_args: Any) -> None:
        statements.append((statement, parameters))

    with sqlite_db.read_session() as s:
        engine = s.get_bind()
        event.listen(engine, "before_cursor_execute", seen)
        try:
            metrics.supersession(s, job_id)
        finally:
            event.remove(engine, "before_cursor_execute", seen)
        # the attempts' first steps in one statement, then the rollback generations' by
        # seeks (metrics._generation_firsts): five for one generation of one attempt
        assert len(statements) == 1 + 5, statements
        plans = []
        for statement, parameters in statements:
            plan = s.connection().exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            plans.append([str(row[-1]) for row in plan])
    for details in plans:
        assert not [d for d in details if d.startswith("SCAN job_metrics")], details
    assert any("ix_job_metrics_job_id_attempt_step" in d for d in plans[0]), plans[0]
    for details in plans[1:]:
        assert any("ix_job_metrics_job_id_rollback" in d for d in details), details


def test_the_migration_adds_and_drops_the_attempts_keeping_the_records(db: Database) -> None:
    """Revision 0029 down to 0028 drops the column and its index and keeps the records; up
    again, they have no attempt (attempt 0: a later attempt supersedes them)."""
    job_id = _crash_and_resume(db)

    def columns() -> set[str]:
        return {c["name"] for c in inspect(db.engine).get_columns("job_metrics")}

    try:
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0028")
        assert "attempt" not in columns()
        assert "ix_job_metrics_job_id_attempt_step" not in {
            i["name"] for i in inspect(db.engine).get_indexes("job_metrics")
        }
        with db.engine.connect() as conn:
            count = "SELECT count(*) FROM job_metrics WHERE job_id = :j"
            assert conn.execute(text(count), {"j": job_id}).scalar_one() == 17
    finally:
        upgrade_database(db.engine)  # the PostgreSQL template is shared: leave it at head
    assert "attempt" in columns()
    assert {a for _, a, _ in _steps(db, job_id, superseded=True)} == {None}
    _report(db, job_id, 3, [{"step": 9, "loss": 0.1}])
    assert [(s, a) for s, a, _ in _steps(db, job_id)][-2:] == [(8, None), (9, 3)]
