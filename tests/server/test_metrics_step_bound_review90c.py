"""Reading a job's metrics by step.

A page by step never ends inside a step: a step alone over ``limit`` came whole, however
many records it had, so a run that reported one step over and over (thousands of records
at step 0) had all of them read and sent in one reply. Such a page now holds at most
:data:`~danlu.server.services.metrics.MAX_READ` records (the largest ``limit``)."""

from __future__ import annotations

import pytest

from danlu.server.db import Database
from danlu.server.services import jobs, metrics, users

NOW = 1_000_000.0


def _job_with_steps(db: Database, steps: list[int]) -> str:
    body = {"name": "m", "command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        job = jobs.submit(s, body, users.get_user(s, "alice"), now=NOW)
        records = [{"step": step, "n": i, "time": NOW + i} for i, step in enumerate(steps)]
        metrics.ingest(s, job, records, now=NOW)
        return job.id


def test_a_lone_step_over_the_limit_is_bounded_by_the_largest_page(
    seeded: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "MAX_READ", 5)
    job_id = _job_with_steps(seeded, [0] * 12 + [1])
    with seeded.read_session() as s:
        page = metrics.list_metrics(s, job_id, limit=2)
        assert [row.data["n"] for row in page] == [0, 1, 2, 3, 4]  # the first, by arrival
        full = metrics.list_metrics(s, job_id, limit=5)
        assert [row.data["n"] for row in full] == [0, 1, 2, 3, 4]
        after = metrics.list_metrics(s, job_id, after_step=0, limit=2)
        assert [row.data["n"] for row in after] == [12]


def test_a_lone_step_within_the_largest_page_still_comes_whole(
    seeded: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "MAX_READ", 5)
    job_id = _job_with_steps(seeded, [0, 0, 0, 0, 1])
    with seeded.read_session() as s:
        page = metrics.list_metrics(s, job_id, limit=2)
        assert [(row.step, row.data["n"]) for row in page] == [(0, 0), (0, 1), (0, 2), (0, 3)]
