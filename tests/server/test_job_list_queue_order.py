"""``GET /jobs`` in the queue's order (``order=queue``: highest priority first, then oldest
first) and with the count of every page (``count=true``: the ``X-Danlu-Count`` header), so
that the dashboard's unfinished jobs can show the pending ones nearest to a start and say how
many of how many it shows, past the 1,000 one list returns, without reading them all: it read
the newest 1,000 pending jobs and picked the oldest of those, leaving out, unsaid, the jobs
that had waited longest. On SQLite (the order and the count are the same SQL on both
stores)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.app import create_app
from danlu.server.db import Database
from danlu.server.services import jobs, users

T = 1_000_000.0
PRIORITIES = (0, 5, 0, -1, 5, 0)
"""The priorities of the jobs ``j0`` to ``j5``, submitted in that order."""


def _submit_all(db: Database) -> None:
    """Alice's jobs of :data:`PRIORITIES`, and one of bob's, ended."""
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 1, gpu_type("H100")),), T)
        bob = users.create_user(s, "bob", now=T)
        for i, priority in enumerate(PRIORITIES):
            body = {"name": f"j{i}", "command": ["true"], "priority": priority}
            jobs.submit(s, body, alice, now=T + i)
        done = jobs.submit(s, {"name": "b", "command": ["true"]}, bob, now=T + 9)
        jobs.cancel_job(s, done.id, bob, now=T + 10)


def test_the_queue_order_and_the_count(sqlite_db: Database) -> None:
    _submit_all(sqlite_db)
    with sqlite_db.read_session() as s:
        queue = jobs.list_jobs(s, states=["PENDING"], order=jobs.QUEUE, limit=4)
        assert [job.name for job in queue] == ["j1", "j4", "j0", "j2"]
        rest = jobs.list_jobs(s, states=["PENDING"], order=jobs.QUEUE, limit=4, offset=4)
        assert [job.name for job in rest] == ["j5", "j3"]
        assert [job.name for job in jobs.list_jobs(s, limit=2)] == ["b", "j5"]  # as before
        assert jobs.count_jobs(s, jobs.listed_jobs(s, states=["PENDING"])) == 6
        assert jobs.count_jobs(s, jobs.listed_jobs(s)) == 7
        assert jobs.count_jobs(s, jobs.listed_jobs(s, user="bob", states=["PENDING"])) == 0
        bob = users.get_user(s, "bob")
        assert (
            jobs.count_jobs(s, jobs.listed_jobs(s, viewer=bob)) == 1
        )  # a user counts their own only
        with pytest.raises(SpecError) as cursor:
            jobs.list_jobs(s, order=jobs.QUEUE, before_id=queue[0].id)
        assert cursor.value.field == "before_id"
        with pytest.raises(SpecError) as order:
            jobs.list_jobs(s, order="oldest")
        assert order.value.field == "order"


@pytest.fixture
def http(tmp_path: Path) -> Iterator[TestClient]:
    """The API app (no loops) on a home with the jobs of :func:`_submit_all`, as alice."""
    settings = load_settings(home=tmp_path, fake_gpus="1x80GiB")
    app = create_app(settings, start_loops=False)
    db = Database(settings.db_url)
    with TestClient(app) as client:
        _submit_all(db)
        with db.session() as s:
            token = users.issue_token(s, users.get_user(s, "alice"), now=T)
        client.headers["Authorization"] = f"Bearer {token}"
        try:
            yield client
        finally:
            db.dispose()


def test_the_route_takes_order_and_count(http: TestClient) -> None:
    params = {"state": "PENDING", "order": "queue", "limit": 2, "count": "true"}
    page = http.get("/api/v1/jobs", params=params)
    assert page.status_code == 200, page.text
    assert [job["name"] for job in page.json()] == ["j1", "j4"]
    assert page.headers["X-Danlu-Count"] == "6"  # every page of the listing, not this one's
    assert "X-Danlu-Count" not in http.get("/api/v1/jobs").headers  # asked for only
    refused = http.get("/api/v1/jobs", params={"order": "oldest"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "order"
    first = page.json()[0]["id"]
    refused = http.get("/api/v1/jobs", params={"order": "queue", "before_id": first})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "before_id"
