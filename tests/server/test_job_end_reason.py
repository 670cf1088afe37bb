"""A Job's ``end_reason``: why a job that ended (SUCCEEDED, FAILED, CANCELLED) ended, the
reason of the event that ended it, in ``GET /jobs`` and ``GET /jobs/{id}`` (the cli and the
dashboard read it from the events feed, a job at a time). On SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import live_server, spec
from sqlalchemy import event

from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.server.db import Database
from danlu.server.services import jobs, users

NOW = 1_000_000.0  # the clock of the seeded store
SHARE = [{"node": "node-0", "gpu": 0, "milli": 1000, "memory": 80 * GiB}]
BODY = {"name": "j", "command": ["python", "t.py"], "resources": {"gpus": 1}}


def _statements(db: Database) -> list[str]:
    """The SQL statements ``db`` runs from now on."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    return seen


def test_end_reasons_of_a_page_in_one_query(seeded: Database) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        failed = jobs.submit(s, BODY, alice, now=NOW)
        jobs.change_state(s, failed, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
        jobs.change_state(s, failed, JobState.FAILED, "exit 3", NOW + 2, exit_code=3)
        done = jobs.submit(s, BODY, alice, now=NOW)
        jobs.change_state(s, done, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
        jobs.settle_exit(s, done, succeeded=True, exit_code=0, reason="exited 0", now=NOW + 2)
        queued = jobs.submit(s, BODY, alice, now=NOW)
        jobs.cancel_job(s, queued.id, alice, now=NOW + 3)
        running = jobs.submit(s, BODY, alice, now=NOW)
        jobs.change_state(s, running, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
        pending = jobs.submit(s, BODY, alice, now=NOW)
        other = jobs.submit(s, BODY, alice, now=NOW)
        jobs.cancel_job(s, other.id, alice, now=NOW + 3)
        ids = [failed.id, done.id, queued.id, running.id, pending.id, other.id]
    with seeded.read_session() as s:
        page = [jobs.get_job(s, job_id) for job_id in ids[:-1]]  # not ``other``
        ran = _statements(seeded)
        found = jobs.end_reasons(s, page)
    assert found == {
        failed.id: "exit 3",
        done.id: "exited 0",
        queued.id: "cancelled by alice",
    }
    assert len(ran) == 1, ran
    with seeded.read_session() as s:
        unended = [jobs.get_job(s, running.id), jobs.get_job(s, pending.id)]
        ran.clear()
        assert jobs.end_reasons(s, unended) == {}
    assert ran == []  # no query for a page without an ended job


def test_the_api_gives_an_ended_jobs_end_reason(tmp_path: Path, db_url: str) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as c,
    ):
        cancelled = c.post("/jobs", json=spec("never-ran", "pass")).json()
        answer = c.post(f"/jobs/{cancelled['id']}/cancel")
        assert answer.status_code == 200, answer.text
        assert answer.json()["end_reason"] == "cancelled by admin"
        queued = c.post("/jobs", json=spec("queued", "pass")).json()
        assert queued["end_reason"] is None
        one = c.get(f"/jobs/{cancelled['id']}").json()
        assert one["state"] == "CANCELLED" and one["end_reason"] == "cancelled by admin"
        assert c.get(f"/jobs/{queued['id']}").json()["end_reason"] is None
        listed = {job["id"]: job for job in c.get("/jobs").json()}
        assert listed[cancelled["id"]]["end_reason"] == "cancelled by admin"
        assert listed[queued["id"]]["end_reason"] is None
