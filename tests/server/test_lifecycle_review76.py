"""The job lifecycle's review: a webhook outcome the store cannot write at once (busy,
away) is written a moment later instead of being dropped (its delivery was posted again,
a delivered one twice, once its lock expired); a long deadline's reason says its seconds
as docs/api.md does (``1209600s``, not ``1.2096e+06s``); a running job released after a
round's snapshot is not preempted as if still held."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from interleave import Interleave
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.sched.registry import make_policy
from danlu.sched.view import Plan
from danlu.server.db import Database
from danlu.server.services import jobs, nodes, users, webhooks
from danlu.server.services.cluster import replace_inventory
from danlu.server.services.record import Applied, apply_plan
from danlu.server.services.view import HELD_DRAIN, Snapshot, build_snapshot
from danlu.server.webhook_sender import WebhookSender

NOW = 1_000_000.0


class Endpoint:
    """An HTTP endpoint answering 200 (``delay`` seconds after the post came), counting
    the posts."""

    def __init__(self, delay: float = 0.0) -> None:
        self.posts = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.posts += 1
                time.sleep(delay)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/x"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    served = Endpoint()
    yield served
    served.close()


def test_an_outcome_the_store_cannot_write_at_once_is_written_later_not_posted_twice(
    db: Database, endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.session() as s:
        hook = webhooks.create(s, endpoint.url, "admin", now=NOW)
        webhooks.ping(s, hook.id, now=NOW)
    sender = WebhookSender(db, interval=0.05, timeout=5.0)
    real = sender._record
    failures = [OperationalError("COMMIT", {}, Exception("database is locked"))] * 2

    def busy_store(session: Any, outcome: Any) -> bool:
        if failures:  # as a commit that failed: the transaction is rolled back
            raise failures.pop()
        return real(session, outcome)

    monkeypatch.setattr(sender, "_record", busy_store)
    try:
        assert sender.run_once(now=NOW) == 1
        # long after the lock's expiry: nothing is due, nothing posted again
        assert sender.run_once(now=NOW + 3 * sender.ttl) == 0
    finally:
        sender.stop()
    with db.read_session() as s:
        [delivery] = webhooks.deliveries(s, hook.id)
        done = (delivery.delivered, delivery.attempts, delivery.lock_token)
    assert done == (True, 1, None)
    assert endpoint.posts == 1


def test_a_claim_that_fails_while_a_post_is_under_way_leaves_its_outcome_written(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = Endpoint(delay=0.5)
    with db.session() as s:
        hook = webhooks.create(s, slow.url, "admin", now=NOW)
        webhooks.ping(s, hook.id, now=NOW)
    sender = WebhookSender(db, interval=0.05, timeout=5.0)
    real = sender._post_due
    calls: list[int] = []

    def claim_fails_once_posting(*args: Any) -> int:
        calls.append(len(calls))
        if len(calls) == 2:  # the first claim's post is under way
            raise OperationalError("SELECT", {}, Exception("database is locked"))
        return real(*args)

    monkeypatch.setattr(sender, "_post_due", claim_fails_once_posting)
    try:
        assert sender.run_once(now=NOW) == 1
        assert sender.run_once(now=NOW + 3 * sender.ttl) == 0
    finally:
        sender.stop()
        slow.close()
    with db.read_session() as s:
        [delivery] = webhooks.deliveries(s, hook.id)
        done = (delivery.delivered, delivery.attempts, delivery.lock_token)
    assert done == (True, 1, None)
    assert slow.posts == 1 and len(calls) >= 2


@pytest.mark.parametrize(
    ("deadline", "said"),
    [(14 * 86400, "1209600s"), (3_000_000.25, "3000000.25s"), (50, "50s"), (0.5, "0.5s")],
)
def test_a_deadline_s_reason_says_its_seconds_without_an_exponent(
    db: Database, deadline: float, said: str
) -> None:
    submitted = 1_733_000_000.123  # a real clock's time: the difference is not exact
    with db.session() as s:
        alice = users.create_user(s, "alice", now=submitted)
        replace_inventory(s, [Node("a", 1, gpu_type("H100"))], fake=True, now=submitted)
        body = {"name": "late", "command": ["python", "t.py"], "deadline": deadline}
        job = jobs.submit(s, body, alice, now=submitted).id
    with db.read_session() as s:
        due = jobs.expired(s, now=submitted + deadline + 1)
    assert due == [(job, f"deadline passed: not finished {said} after submission")]


def test_a_running_job_released_after_the_round_s_snapshot_keeps_running(db: Database) -> None:
    """``PATCH {"held": false}`` committed between a round's snapshot (which hands the held
    job in to be preempted) and the record of its plan: the job keeps running, as a job
    released before its preemption does (on SQLite: a snapshot read before the release)."""
    node = Node("a", 1, gpu_type("H100"))
    with db.session() as s:
        alice = users.create_user(s, "alice", now=NOW)
        replace_inventory(s, [node], fake=True, now=NOW)
        body = {"name": "held", "command": ["python", "t.py"], "preemptible": True}
        job = jobs.submit(s, body, alice, now=NOW)
        share = {"node": "a", "gpu": 0, "milli": 1000, "memory": 80 * GiB}
        jobs.change_state(s, job, JobState.RUNNING, "go", NOW, allocation=[share])
        jobs.hold(s, job.id, True, alice, now=NOW + 1)
        held = job.id
    policy = make_policy("fifo")

    def _plan(snap: Snapshot) -> Plan:  # as the reconcile loop makes it
        return nodes.with_drains(policy.schedule(snap.view), snap.drains)

    def release(s: Session) -> None:  # PATCH /jobs/{id} {"held": false}
        jobs.hold(s, held, False, alice, now=NOW + 2)

    if db.dialect == "postgresql":  # the release commits between the snapshot and the record
        race = Interleave(db)

        def round_(s: Session) -> Applied:
            snap = build_snapshot(s, NOW + 2)
            assert snap.drains == {held: HELD_DRAIN}
            race.pause()
            return apply_plan(s, _plan(snap), NOW + 2, snap.withheld, snap)

        outcome = race.run(round_, release)
        assert outcome.first_error is None and outcome.second_error is None
        applied = outcome.first
    else:  # a round holds SQLite's write lock from its first read: an earlier snapshot
        with db.read_session() as s:
            snap = build_snapshot(s, NOW + 2)
        assert snap.drains == {held: HELD_DRAIN}
        with db.session() as s:
            release(s)
        with db.session() as s:
            applied = apply_plan(s, _plan(snap), NOW + 2, snap.withheld, snap)
    assert applied.preempted == []
    assert applied.skipped == {held: "released since the view was built"}
    with db.read_session() as s:
        kept = jobs.get_job(s, held)
        assert (kept.state, kept.held_at, kept.preemptions) == ("RUNNING", None, 0)
    with db.session() as s:  # and a job still held is preempted as before
        jobs.hold(s, held, True, alice, now=NOW + 3)
    with db.session() as s:
        snap = build_snapshot(s, NOW + 4)
        applied = apply_plan(s, _plan(snap), NOW + 4, snap.withheld, snap)
        assert [j.id for j in applied.preempted] == [held]
