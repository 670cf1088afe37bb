"""Reading a job's metrics.

Paging by step (``after_step`` = the last step of the page before) lost the records of a
step the page's ``limit`` cut: the next page starts after that step. A page now never ends
inside a step. And the ``X-Danlu-Metrics-Cursor`` of a page by step was read after its
records: on PostgreSQL a record stored in between was in neither the page nor, after the
cursor, the next poll. The cursor is read first now, and the page holds no record after it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import Live, live_server

from danlu.server.db import Database
from danlu.server.services import jobs, metrics, users

NOW = 1_000_000.0
STEPS = [1, 1, 2, 2, 2, 3, 4, 4]
"""The steps of the records a job reports, several records a step (a loss and an eval)."""


def _job_with_records(db: Database, steps: list[int]) -> str:
    body = {"name": "m", "command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        job = jobs.submit(s, body, users.get_user(s, "alice"), now=NOW)
        records = [{"step": step, "n": i, "time": NOW + i} for i, step in enumerate(steps)]
        metrics.ingest(s, job, records, now=NOW)
        return job.id


def _paged_by_step(db: Database, job_id: str, limit: int) -> list[list[tuple[int, int]]]:
    """Every page read with ``after_step`` = the last step of the page before."""
    pages: list[list[tuple[int, int]]] = []
    after = -1
    with db.read_session() as s:
        while page := metrics.list_metrics(s, job_id, after_step=after, limit=limit):
            pages.append([(row.step, row.data["n"]) for row in page])
            after = page[-1].step
    return pages


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5])
def test_paging_by_step_loses_no_record_whatever_the_limit(seeded: Database, limit: int) -> None:
    job_id = _job_with_records(seeded, STEPS)
    pages = _paged_by_step(seeded, job_id, limit)
    assert [record for page in pages for record in page] == list(
        zip(STEPS, range(len(STEPS)), strict=True)
    )
    for page in pages:  # each step in one page, whole
        assert all(STEPS.count(step) == [s for s, _ in page].count(step) for step, _ in page)


def test_a_page_is_cut_before_the_step_its_limit_splits(seeded: Database) -> None:
    job_id = _job_with_records(seeded, STEPS)
    assert _paged_by_step(seeded, job_id, 3) == [
        [(1, 0), (1, 1)],  # step 2's three records do not fit with them: the next page's
        [(2, 2), (2, 3), (2, 4)],
        [(3, 5), (4, 6), (4, 7)],
    ]


def test_a_step_with_more_records_than_the_limit_comes_whole(seeded: Database) -> None:
    job_id = _job_with_records(seeded, STEPS)
    assert _paged_by_step(seeded, job_id, 2) == [
        [(1, 0), (1, 1)],
        [(2, 2), (2, 3), (2, 4)],  # alone over the limit: all of it
        [(3, 5)],
        [(4, 6), (4, 7)],
    ]


def test_the_tail_and_the_cursor_mode_keep_their_limit(seeded: Database) -> None:
    job_id = _job_with_records(seeded, STEPS)
    with seeded.read_session() as s:
        tail = metrics.list_metrics(s, job_id, limit=2, tail=True)
        assert [row.data["n"] for row in tail] == [6, 7]
        by_arrival = metrics.list_metrics(s, job_id, limit=3, after_id=0)
        assert [row.data["n"] for row in by_arrival] == [0, 1, 2]


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[Live]:
    """A server on each backend whose scheduling loops do not run."""
    with live_server(tmp_path, db_url=db_url, start_loops=False) as server:
        yield server


@pytest.mark.parametrize("read_before_the_store", ["list_metrics", "cursor"])
def test_a_record_stored_while_a_page_is_read_comes_once_after_its_cursor(
    live: Live, monkeypatch: pytest.MonkeyPatch, read_before_the_store: str
) -> None:
    """A record committed while the page is read (forced here right after one of its two
    reads) is in the page or after its cursor, once: neither lost nor listed twice."""
    with live.client() as c:
        body = {"name": "m", "command": ["sleep", "1"], "resources": {"gpus": 1}}
        response = c.post("/jobs", json=body)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        assert c.post(f"/jobs/{job_id}/metrics", json={"metrics": [{"step": 1}]}).is_success
    assert live.prepared is not None
    db: Database = live.prepared.app.state.danlu.db
    real = getattr(metrics, read_before_the_store)
    stored: list[int] = []

    def read_then_store(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        if not stored:  # another request stores a record now, before the reply is made
            with db.session() as s:
                stored.append(metrics.ingest(s, jobs.get_job(s, job_id), [{"step": 2}]))
        return found

    with live.client() as c:
        with monkeypatch.context() as patched:
            patched.setattr(metrics, read_before_the_store, read_then_store)
            first = c.get(f"/jobs/{job_id}/metrics")
        then = c.get(f"/jobs/{job_id}/metrics", params={"after_id": _cursor(first)})
    assert stored == [1]
    seen = [m["step"] for m in first.json()] + [m["step"] for m in then.json()]
    assert sorted(seen) == [1, 2]


def _cursor(response: httpx.Response) -> int:
    assert response.status_code == 200, response.text
    return int(response.headers["X-Danlu-Metrics-Cursor"])
