"""Requests that race each other, or the reconcile loop, on one row: the user's limit of
unfinished jobs holds, a change of a job waits for a concurrent one instead of failing, and
a project's members are replaced whole. Each race is interleaved deterministically
(:class:`~interleave.Interleave`: the first transaction paused at the point that matters
while the second runs) on both backends; on PostgreSQL the HTTP cases also send many
requests at once through a barrier and check what must hold whatever the interleaving."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import live_server, spec, submit, user_and_nodes
from interleave import Interleave
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.db import Database
from danlu.server.db.models import Job, User
from danlu.server.errors import ConflictError
from danlu.server.services import jobs, members, metrics, projects, users

T = 1_000_000.0
BODY = {"name": "race", "command": ["python", "train.py"]}


def _alice(db: Database) -> None:
    with db.session() as s:
        user_and_nodes(s, (Node("a", 2, gpu_type("H100")),), T)
        users.create_user(s, "bob", now=T)
        projects.ensure_default_project(s, T)  # made now: its first use would wait on it


def _unfinished(db: Database, name: str) -> int:
    with db.read_session() as s:
        query = select(func.count()).select_from(Job).join(Job.user)
        return int(s.scalar(query.where(User.name == name, Job.finished_at.is_(None))) or 0)


def test_two_submissions_at_once_stay_within_the_unfinished_jobs_limit(db: Database) -> None:
    _alice(db)
    race = Interleave(db)

    def first(s: Session) -> str:
        job = jobs.submit(s, BODY, users.get_user(s, "alice"), max_unfinished=1, now=T)
        race.pause()  # counted and inserted, not committed
        return job.id

    def second(s: Session) -> str:
        return jobs.submit(s, BODY, users.get_user(s, "alice"), max_unfinished=1, now=T).id

    outcome = race.run(first, second)
    assert outcome.first_error is None
    assert isinstance(outcome.second_error, ConflictError), outcome.second_error
    assert "user alice has 1 unfinished jobs" in str(outcome.second_error)
    assert _unfinished(db, "alice") == 1
    assert outcome.second_waited == (db.dialect == "postgresql")  # for the owner's row lock
    with db.session() as s:  # another user is not held up by alice's limit
        jobs.submit(s, BODY, users.get_user(s, "bob"), max_unfinished=1, now=T)


def _loop_write(job_id: str, race: Interleave) -> Callable[[Session], None]:
    """The reconcile loop's kind of change: the job read, changed, flushed, and the
    transaction paused before it commits (the row stays locked)."""

    def write(s: Session) -> None:
        job = jobs.get_job(s, job_id)
        job.batch_size = 77
        jobs.flush_or_conflict(s, job_id)
        race.pause()

    return write


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        (lambda s, j, u: jobs.set_priority(s, j, 7, u), {"priority": 7}),
        (lambda s, j, u: jobs.hold(s, j, True, u, now=T + 1), {"held_at": T + 1}),
        (lambda s, j, u: jobs.cancel_job(s, j, u, now=T + 1), {"state": "CANCELLED"}),
    ],
    ids=["priority", "hold", "cancel"],
)
def test_a_change_of_a_job_waits_for_a_concurrent_one_instead_of_failing(
    db: Database, change: Callable[[Session, str, User], Job], expect: dict[str, Any]
) -> None:
    _alice(db)
    with db.session() as s:
        job_id = jobs.submit(s, BODY, users.get_user(s, "alice"), now=T).id
    race = Interleave(db)
    outcome = race.run(
        _loop_write(job_id, race), lambda s: change(s, job_id, users.get_user(s, "alice"))
    )
    assert outcome.first_error is None
    assert outcome.second_error is None, outcome.second_error
    assert outcome.second_waited == (db.dialect == "postgresql")  # for the loop's row lock
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert job.batch_size == 77  # the loop's write stays
        assert {key: getattr(job, key) for key in expect} == expect


def test_two_member_lists_at_once_replace_each_other_whole(db: Database) -> None:
    _alice(db)
    with db.session() as s:
        projects.create_project(s, "nlp", now=T)
    race = Interleave(db)

    def first(s: Session) -> list[str]:
        listed = members.set_members(s, projects.get_project(s, "nlp"), ["alice", "bob"])
        race.pause()  # the old list deleted, the new one inserted, not committed
        return listed

    def second(s: Session) -> list[str]:
        return members.set_members(s, projects.get_project(s, "nlp"), ["bob", "alice"])

    outcome = race.run(first, second)
    assert outcome.first_error is None
    assert outcome.second_error is None, outcome.second_error
    assert outcome.first == outcome.second == ["alice", "bob"]
    assert outcome.second_waited == (db.dialect == "postgresql")  # for the project's row lock
    with db.read_session() as s:
        assert members.members(s, projects.get_project(s, "nlp")) == ["alice", "bob"]


def test_a_metric_time_too_large_for_a_float_names_the_field(db: Database) -> None:
    _alice(db)
    with db.session() as s:
        job = jobs.submit(s, BODY, users.get_user(s, "alice"), now=T)
        for when in (10**400, -(10**400)):
            with pytest.raises(SpecError, match="seconds") as raised:
                metrics.ingest(s, job, [{"step": 1, "time": 1.0}, {"step": 2, "time": when}])
            assert raised.value.field == "metrics.1.time"
        assert metrics.ingest(s, job, [{"step": 3, "time": 10**9}]) == 1  # an int that fits


def _user_token(c: httpx.Client, name: str) -> str:
    c.post("/users", json={"name": name}).raise_for_status()
    token = c.post(f"/users/{name}/tokens", json={"name": "t"}).json()["token"]
    return str(token)


def _at_once(count: int, send: Callable[[int], httpx.Response]) -> list[httpx.Response]:
    """``send(i)`` for ``i`` in ``range(count)``, released together by a barrier; the
    responses."""
    barrier = threading.Barrier(count)
    got: list[httpx.Response] = []
    lock = threading.Lock()

    def go(i: int) -> None:
        barrier.wait()
        response = send(i)
        with lock:
            got.append(response)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == count, "a request raised"
    return got


def _codes(responses: list[httpx.Response]) -> Counter[int]:
    return Counter(r.status_code for r in responses)


def test_the_api_under_concurrent_requests(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many requests at once over HTTP: submissions past ``DANLU_MAX_JOBS_PER_USER`` are
    409 and no more jobs are made; changes of one job all go through; identical member
    lists all answer 200 (the HTTP form of the three races above)."""
    monkeypatch.setenv("DANLU_MAX_JOBS_PER_USER", "3")
    with (
        live_server(tmp_path, fake_gpus="2x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as admin,
    ):
        token = _user_token(admin, "alice")
        _user_token(admin, "bob")
        clients = [live.client(token) for _ in range(16)]
        try:
            sent = _at_once(16, lambda i: clients[i].post("/jobs", json=spec(f"j{i}", "0")))
            assert _codes(sent) == Counter({201: 3, 409: 13})
            mine = clients[0].get("/jobs", params={"limit": 1000}).json()
            assert len(mine) == 3
            for job in mine:
                path = f"/jobs/{job['id']}"
                sent = _at_once(
                    6, lambda i, path=path: clients[i].patch(path, json={"priority": i})
                )
                assert _codes(sent) == Counter({200: 6}), [r.text for r in sent]
            for job in mine[:2]:
                path = f"/jobs/{job['id']}/cancel"
                sent = _at_once(4, lambda i, path=path: clients[i].post(path))
                assert _codes(sent) == Counter({200: 1, 409: 3}), [r.text for r in sent]
                refused = [r.json()["error"]["message"] for r in sent if r.status_code == 409]
                assert all("already finished" in m for m in refused), refused
            assert submit(clients[0], spec("after", "0"))["state"] == "PENDING"
        finally:
            for client in clients:
                client.close()
        assert admin.post("/projects", json={"name": "nlp"}).status_code == 201
        admins = [live.client() for _ in range(8)]
        try:
            body = {"members": ["alice", "bob"]}
            for _ in range(5):
                sent = _at_once(8, lambda i: admins[i].put("/projects/nlp", json=body))
                assert _codes(sent) == Counter({200: 8}), [r.text for r in sent]
        finally:
            for client in admins:
                client.close()
        (nlp,) = [p for p in admin.get("/projects").json() if p["name"] == "nlp"]
        assert nlp["members"] == ["alice", "bob"]
