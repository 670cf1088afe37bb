"""A run that rolls back in process to a checkpoint (danlu.train's anomaly recovery) redoes
the steps after it within one attempt. Its replay's records carry ``rollback`` (the
generation: 1, after a second rollback 2, ...), and the metric list hides the first try's
records of the steps the replay reported again, as a later attempt hides an earlier one's;
records without the field are told apart by attempts alone, as before. On SQLite and
PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from helpers import user_and_nodes
from sqlalchemy import inspect, select, text, update

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.db import Database, Job, JobMetric, upgrade_database
from danlu.server.db.migrate import alembic_config
from danlu.server.services import jobs, metrics

T = 1_000_000.0


def _job(db: Database) -> str:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 1, gpu_type("H100")),), T)
        return jobs.submit(s, {"name": "m", "command": ["true"]}, alice, now=T).id


def _report(db: Database, job_id: str, attempt: int, records: list[dict[str, Any]]) -> None:
    with db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(attempt=attempt))
        job = s.scalars(select(Job).where(Job.id == job_id)).one()
        metrics.ingest(s, job, records)


def _shown(db: Database, job_id: str, **kwargs: Any) -> list[tuple[int, Any]]:
    with db.read_session() as s:
        return [(m.step, m.data.get("loss")) for m in metrics.list_metrics(s, job_id, **kwargs)]


def _rolled_back(db: Database) -> str:
    """Attempt 1 reports steps 1-6 (an anomaly at 7), rolls back to step 3's checkpoint and
    redoes 4-8 as generation 1; the first try's records carry no field (0)."""
    job_id = _job(db)
    _report(db, job_id, 1, [{"step": s, "loss": 10.0 + s} for s in range(1, 7)])
    _report(db, job_id, 1, [{"step": s, "loss": float(s), "rollback": 1} for s in range(4, 9)])
    return job_id


def test_the_first_trys_records_of_the_replayed_steps_are_hidden(db: Database) -> None:
    job_id = _rolled_back(db)
    expected = [(1, 11.0), (2, 12.0), (3, 13.0), (4, 4.0), (5, 5.0), (6, 6.0), (7, 7.0), (8, 8.0)]
    assert _shown(db, job_id) == expected
    assert _shown(db, job_id, tail=True, limit=3) == expected[-3:]
    # step paging: each step once, page after page
    first = _shown(db, job_id, limit=4)
    assert first == expected[:4]
    assert _shown(db, job_id, after_step=4, limit=4) == expected[4:]
    with db.read_session() as s:
        every = metrics.list_metrics(s, job_id, superseded=True)
        seen = metrics.supersession(s, job_id)
        hidden = [
            (m.step, m.rollback) for m in every if seen.superseded(m.attempt, m.step, m.rollback)
        ]
        assert hidden == [(4, None), (5, None), (6, None)]
        assert len(every) == 11
        # the SQL condition and the Python test agree on every record
        assert [m.id for m in every if not seen.superseded(m.attempt, m.step, m.rollback)] == [
            m.id for m in metrics.list_metrics(s, job_id)
        ]


def test_a_later_attempt_supersedes_every_generation_and_a_second_rollback_the_first(
    db: Database,
) -> None:
    job_id = _rolled_back(db)
    # a second rollback, to step 5's checkpoint: generation 2 redoes 6-7
    _report(db, job_id, 1, [{"step": s, "loss": 100.0 + s, "rollback": 2} for s in (6, 7)])
    assert _shown(db, job_id) == [
        (1, 11.0), (2, 12.0), (3, 13.0), (4, 4.0), (5, 5.0), (6, 106.0), (7, 107.0)
    ]  # fmt: skip
    # then the run is preempted and attempt 2 resumes from step 2's checkpoint (generation 0)
    _report(db, job_id, 2, [{"step": s, "loss": -float(s)} for s in (3, 4)])
    assert _shown(db, job_id) == [(1, 11.0), (2, 12.0), (3, -3.0), (4, -4.0)]


def test_records_without_the_field_are_told_apart_by_attempts_alone(db: Database) -> None:
    """An old client (no field): records of one attempt at one step are all kept, as before."""
    job_id = _job(db)
    _report(db, job_id, 1, [{"step": s, "loss": float(s)} for s in range(1, 5)])
    _report(db, job_id, 1, [{"step": s, "loss": 10.0 + s} for s in (2, 3)])
    assert _shown(db, job_id) == [(1, 1.0), (2, 2.0), (2, 12.0), (3, 3.0), (3, 13.0), (4, 4.0)]
    with db.read_session() as s:
        rows = list(s.scalars(select(JobMetric).where(JobMetric.job_id == job_id)))
        seen = metrics.supersession(s, job_id)
        assert not any(seen.superseded(m.attempt, m.step, m.rollback) for m in rows)
        assert all(m.rollback is None for m in rows)


def test_a_record_without_the_field_sent_during_the_replay_is_the_replays(db: Database) -> None:
    """A user's eval sent after the replay began (no field) is of the attempt's latest
    generation: not hidden by the replay, which came before it."""
    job_id = _rolled_back(db)
    _report(db, job_id, 1, [{"step": 8, "val_loss": 0.5}])
    with db.read_session() as s:
        rows = metrics.list_metrics(s, job_id)
        assert [(m.step, m.rollback, sorted(m.data)) for m in rows][-2:] == [
            (8, 1, ["loss"]),
            (8, 1, ["val_loss"]),
        ]


@pytest.mark.parametrize("value", [-1, 1.5, "1", True, [1], 2**31])
def test_a_bad_rollback_is_refused_naming_the_field(db: Database, value: Any) -> None:
    job_id = _job(db)
    records = [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 1.0, "rollback": value}]
    with pytest.raises(SpecError) as err, db.session() as s:
        job = s.scalars(select(Job).where(Job.id == job_id)).one()
        metrics.ingest(s, job, records)
    assert err.value.field == "metrics.1.rollback"
    assert "whole number" in err.value.message
    assert _shown(db, job_id) == []  # nothing of the batch stored


def test_a_null_rollback_is_taken_as_absent(db: Database) -> None:
    job_id = _job(db)
    _report(db, job_id, 1, [{"step": 1, "loss": 1.0, "rollback": None}])
    with db.read_session() as s:
        (row,) = metrics.list_metrics(s, job_id)
        assert row.rollback is None and row.data == {"loss": 1.0}


def test_supersession_of_orders_attempts_and_generations() -> None:
    seen = metrics.supersession_of([(1, 1), (2, 5)], [(1, 1, 3)])
    assert seen.superseded(1, 2) is False  # (1, 0) below (1, 1) from step 3 on
    assert seen.superseded(1, 3) is True
    assert seen.superseded(1, 4, 1) is False  # (1, 1) below (2, 0) from step 5 on
    assert seen.superseded(1, 5, 1) is True
    assert seen.superseded(2, 100) is False  # the last key
    assert seen.superseded(None, 3) is True  # attempt 0
    # the attempts alone, as a reader without generations passes them: as before
    assert metrics.supersession_of([(1, 1), (2, 5)]).superseded(1, 4) is False


def test_the_migration_adds_and_drops_the_generations_keeping_the_records(db: Database) -> None:
    """Revision 0033 down to 0032 drops the column and its index and keeps the records; up
    again, they have no generation (0): each step's records of the attempt are all listed,
    as a server without generations listed them."""
    job_id = _rolled_back(db)

    def columns() -> set[str]:
        return {c["name"] for c in inspect(db.engine).get_columns("job_metrics")}

    try:
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0032")
        assert "rollback" not in columns()
        assert "ix_job_metrics_job_id_rollback" not in {
            i["name"] for i in inspect(db.engine).get_indexes("job_metrics")
        }
        with db.engine.connect() as conn:
            count = "SELECT count(*) FROM job_metrics WHERE job_id = :j"
            assert conn.execute(text(count), {"j": job_id}).scalar_one() == 11
    finally:
        upgrade_database(db.engine)  # the PostgreSQL template is shared: leave it at head
    assert "rollback" in columns()
    assert [step for step, _ in _shown(db, job_id)] == [1, 2, 3, 4, 4, 5, 5, 6, 6, 7, 8]
