"""``GET /jobs`` pages by a cursor too (``before_id``: the last job of the page before), so a
job submitted between two pages neither comes twice nor pushes one out of sight, as it does
to pages read by ``offset``. On SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import live_server, spec, submit, user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.db import Database
from danlu.server.services import jobs, users

T = 1_000_000.0


def _page(
    db: Database, limit: int, before_id: str | None = None, offset: int = 0
) -> list[tuple[str, str]]:
    """``(name, id)`` of the jobs an admin's listing gives."""
    with db.read_session() as s:
        rows = jobs.list_jobs(s, limit=limit, before_id=before_id, offset=offset)
        return [(job.name, job.id) for job in rows]


def _names(rows: list[tuple[str, str]]) -> list[str]:
    return [name for name, _ in rows]


def test_a_job_submitted_between_two_pages_shifts_no_page(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 1, gpu_type("H100")),), T)
        for i in range(5):
            jobs.submit(s, {"name": f"j{i}", "command": ["true"]}, alice, now=T + i)
        alice_name = alice.name
    first = _page(db, limit=2)
    assert _names(first) == ["j4", "j3"]
    with db.session() as s:  # between the two pages
        alice = users.get_user(s, alice_name)
        jobs.submit(s, {"name": "late", "command": ["true"]}, alice, now=T + 10)
    after = _page(db, limit=2, before_id=first[-1][1])
    rest = _page(db, limit=2, before_id=after[-1][1])
    skipped = _page(db, limit=2, before_id=first[-1][1], offset=1)
    assert _names(after) == ["j2", "j1"]
    assert _names(rest) == ["j0"]
    assert _names(skipped) == ["j1", "j0"]  # offset counts after the cursor


def test_a_cursor_naming_no_job_of_the_viewer_is_refused(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 1, gpu_type("H100")),), T)
        users.create_user(s, "bob")
        theirs = jobs.submit(s, {"name": "a", "command": ["true"]}, alice, now=T).id
    with db.read_session() as s:
        bob = users.get_user(s, "bob")
        for cursor in ("nosuchjob", theirs, theirs[:4]):  # a prefix is no cursor
            with pytest.raises(SpecError) as refused:
                jobs.list_jobs(s, viewer=bob, before_id=cursor)
            assert refused.value.field == "before_id"
        assert jobs.list_jobs(s, before_id=theirs) == []  # an admin's read


def test_the_api_pages_by_before_id(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live:
        client = live.client()
        ids = [submit(client, spec(f"j{i}", "pass"))["id"] for i in range(3)]
        page = client.get("/jobs", params={"limit": 2, "before_id": ids[2]})
        assert page.status_code == 200, page.text
        assert [job["id"] for job in page.json()] == [ids[1], ids[0]]
        unknown = client.get("/jobs", params={"before_id": "nosuchjob"})
        assert unknown.status_code == 422, unknown.text
        assert "before_id" in unknown.text
