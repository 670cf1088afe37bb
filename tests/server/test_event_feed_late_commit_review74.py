"""The feeds followed by id (``GET /events``, ``GET /jobs/{id}/events`` and
``GET /jobs/{id}/metrics`` with ``after_id`` or its cursor header): on PostgreSQL an id is
taken at insert, not at commit, so a row could commit after one with a higher id had been
returned, and a follower (asking for ids above the last it saw) never got it. Only settled
rows are returned now: none above an id that a transaction still open may commit
(:func:`~danlu.server.services.settled.settled_id`)."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.server.db import Database, JobEvent, JobMetric
from danlu.server.services import events, jobs, metrics, users

NOW = 1_000_000.0
BODY: dict[str, Any] = {"name": "j", "command": ["python", "t.py"], "resources": {"gpus": 1}}


def _jobs(db: Database) -> tuple[str, str]:
    with db.session() as s:
        first = jobs.submit(s, BODY, users.get_user(s, "alice"), now=NOW).id
        second = jobs.submit(s, BODY, users.get_user(s, "bob"), now=NOW).id
        return first, second


def _event(job_id: str, reason: str) -> JobEvent:
    return JobEvent(job_id=job_id, time=NOW, old="PENDING", new="PENDING", reason=reason)


def _feed_reasons(db: Database, after_id: int) -> list[tuple[int, str]]:
    with db.read_session() as s:
        return [(row.event.id, row.event.reason) for row in events.feed(s, after_id=after_id)]


def _concurrent(db: Database) -> None:
    if db.dialect != "postgresql":
        pytest.skip("SQLite's writers take turns: its ids commit in order")


def test_an_event_committing_after_a_higher_id_is_not_skipped_by_a_follower(
    seeded: Database,
) -> None:
    _concurrent(seeded)
    first, second = _jobs(seeded)
    with seeded.read_session() as s:
        start = max(row.event.id for row in events.feed(s))
    with seeded.session() as late:
        late.add(_event(first, "late"))
        late.flush()  # its id is taken; it commits only when the block ends
        with seeded.session() as early:
            early.add(_event(second, "early"))
        seen = _feed_reasons(seeded, start)
        # a follower's cursor: the last id it saw
        cursor = max((event_id for event_id, _ in seen), default=start)
        with seeded.read_session() as s:  # one job's events: the same
            assert events.list_events(s, second, after_id=start) == []
    seen += _feed_reasons(seeded, cursor)
    assert sorted(reason for _, reason in seen) == ["early", "late"]
    assert len(seen) == 2


def test_an_event_of_a_transaction_rolled_back_holds_nothing_up(seeded: Database) -> None:
    first, second = _jobs(seeded)
    with seeded.session() as s:
        s.add(_event(first, "gone"))
        s.flush()
        s.rollback()
    with seeded.session() as s:
        s.add(_event(second, "kept"))
    with seeded.read_session() as s:
        assert [row.event.reason for row in events.feed(s, tail=True, limit=1)] == ["kept"]
        assert [e.reason for e in events.list_events(s, second, tail=True, limit=1)] == ["kept"]


def _record(job_id: str, step: int) -> JobMetric:
    return JobMetric(job_id=job_id, step=step, time=NOW, data={"loss": 1.0}, attempt=0)


def test_a_metric_record_committing_late_is_not_skipped_by_a_follower(seeded: Database) -> None:
    _concurrent(seeded)
    job_id, _ = _jobs(seeded)
    seen: list[int] = []
    with seeded.session() as late:
        late.add(_record(job_id, 1))
        late.flush()
        with seeded.session() as early:
            early.add(_record(job_id, 2))
        with seeded.read_session() as s:
            start = metrics.cursor(s, job_id)  # a by-step page's cursor header
            seen += [m.step for m in metrics.list_metrics(s, job_id, after_id=0)]
            after = max((m.id for m in metrics.list_metrics(s, job_id, after_id=0)), default=0)
        assert start == 0 and seen == []
    with seeded.read_session() as s:
        seen += [m.step for m in metrics.list_metrics(s, job_id, after_id=after)]
    assert sorted(seen) == [1, 2]
