"""The server: background loops that stop while a pass runs, ..."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from helpers import fake_loop, live_server, serve_locally, spec, submit, user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.loops import PeriodicLoop
from danlu.server.plane_lease import read_holder
from danlu.server.reconcile import Reconciler
from danlu.server.services import events, jobs, webhooks
from danlu.server.webhook_sender import WebhookSender

log = logging.getLogger(__name__)


def _slow_loop(
    entered: threading.Event, release: threading.Event, threads: list[threading.Thread]
) -> PeriodicLoop:
    def work() -> None:
        threads.append(threading.current_thread())
        entered.set()
        release.wait(30)

    return PeriodicLoop("danlu-test-loop", 3600.0, work, log, "test pass", "test passes work")


def test_a_loop_started_again_while_its_last_pass_runs_keeps_one_thread() -> None:
    entered, release, threads = threading.Event(), threading.Event(), list[threading.Thread]()
    loop = _slow_loop(entered, release, threads)
    loop.start()
    try:
        assert entered.wait(30)
        ended = loop.stop(timeout=0.01)
        entered.clear()
        started = threading.Thread(target=loop.start)
        started.start()
        started.join(0.2)
        # the new thread waits for the old one's pass: one pass at a time
        assert started.is_alive() and not entered.is_set()
        assert len([t for t in threading.enumerate() if t.name == "danlu-test-loop"]) == 1
        assert ended is False  # stop said the pass still runs
        release.set()
        started.join(30)
        assert not started.is_alive()
        assert entered.wait(30)
        assert len(threads) == 2 and threads[0] is not threads[1]  # a new one, after the old
        assert len([t for t in threading.enumerate() if t.name == "danlu-test-loop"]) == 1
    finally:
        release.set()
        assert loop.stop(timeout=30) is True


def test_a_stopped_reconciler_keeps_its_lease_while_a_pass_still_runs(
    db: Database, tmp_path: Path
) -> None:
    loop, _world = fake_loop(
        db, (Node("a", 1, gpu_type("H100")),), tmp_path, make_policy("fifo"), 10
    )
    entered, release = threading.Event(), threading.Event()
    real = loop.run_once

    def slow_pass() -> object:
        report = real()
        entered.set()
        release.wait(30)
        return report

    loop.run_once = slow_pass  # type: ignore[method-assign]
    loop.start()
    try:
        assert entered.wait(30)
        with db.read_session() as s:
            assert read_holder(s).token == loop.token
        loop.stop(timeout=0.01)
        with db.read_session() as s:  # not another plane's to take while the pass acts
            assert read_holder(s).token == loop.token
    finally:
        release.set()
        loop.stop(timeout=30)
    with db.read_session() as s:  # given back once the pass ended
        assert read_holder(s).token != loop.token


def test_a_query_parameter_given_twice_where_one_is_read_is_refused(tmp_path: Path) -> None:
    """``?user=a&user=b`` kept the last value without a word; a list parameter
    (``state``) may still repeat."""
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live,
        live.client() as admin,
    ):
        submit(admin, spec("one", "pass"))
        for path, params in (
            ("/jobs", [("user", "admin"), ("user", "nobody")]),
            ("/jobs", [("limit", "1"), ("limit", "5")]),
            ("/sweeps", [("limit", "1"), ("limit", "5")]),
            ("/webhooks/wh-1/deliveries", [("limit", "1"), ("limit", "5")]),
            ("/events", [("user", "admin"), ("user", "nobody")]),
            ("/usage", [("since", "0"), ("since", "5")]),
        ):
            response = admin.get(path, params=params)
            assert response.status_code == 422, (path, response.text)
            error = response.json()["error"]
            assert error["field"] == params[0][0], error
            assert "given 2 times; give it once" in error["message"], error
        both = admin.get("/jobs", params=[("state", "PENDING"), ("state", "RUNNING")])
        assert both.status_code == 200 and [j["name"] for j in both.json()] == ["one"]
        assert admin.get("/jobs", params={"user": "admin"}).status_code == 200


def test_a_user_listing_another_users_jobs_is_refused(tmp_path: Path) -> None:
    """A non-admin's ``GET /jobs?user=bob`` answered an empty list, as if bob had no jobs."""
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live:
        with live.client() as admin:
            for name in ("carol", "bob"):
                assert admin.post("/users", json={"name": name}).status_code == 201
            tokens = {
                name: admin.post(f"/users/{name}/tokens", json={"name": "t"}).json()["token"]
                for name in ("carol", "bob")
            }
        with live.client(tokens["bob"]) as bob:
            submit(bob, spec("bobs", "pass"))
        with live.client(tokens["carol"]) as carol:
            refused = carol.get("/jobs", params={"user": "bob"})
            assert refused.status_code == 403, refused.text
            assert "may list only their own jobs" in refused.json()["error"]["message"]
            assert carol.get("/jobs", params={"user": "carol"}).json() == []
            assert carol.get("/jobs").json() == []
            refused = carol.get("/events", params={"user": "bob"})  # an empty feed before
            assert refused.status_code == 403, refused.text
            assert "may list only their own jobs' events" in refused.json()["error"]["message"]
            assert carol.get("/events", params={"user": "carol"}).json() == []
        with live.client() as admin:  # an admin lists anyone's
            assert [j["name"] for j in admin.get("/jobs", params={"user": "bob"}).json()] == [
                "bobs"
            ]


NOW = 1_000_000.0


def _running(db: Database, tmp_path: Path, **limits: float) -> tuple[Reconciler, str]:
    """A reconcile loop and a job it launched at ``NOW + 10`` (its runs last 1000 s)."""
    node = Node("a", 1, gpu_type("H100"))
    with db.session() as s:
        alice = user_and_nodes(s, (node,), NOW)
        body = {"name": "long", "command": ["python", "train.py"], **limits}
        job_id = jobs.submit(s, body, alice, now=NOW).id
    world = FakeWorld()
    world.script(job_id, duration=1000)
    executor = FakeExecutor(Cluster((node,)), world)
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    assert loop.run_once(now=NOW + 10).launched == [job_id]
    return loop, job_id


def test_a_job_past_its_deadline_and_its_time_limit_is_reported_once(
    db: Database, tmp_path: Path
) -> None:
    """Cancelled at its deadline, it was reported as timed out too (cancelling it again
    for its time limit changed nothing)."""
    loop, job_id = _running(db, tmp_path, deadline=100, time_limit=60)
    report = loop.run_once(now=NOW + 100)
    assert (report.expired, report.timed_out) == ([job_id], [])
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert job.cancel_reason is not None and job.cancel_reason.startswith("deadline")


def test_a_job_its_user_cancelled_meanwhile_is_not_reported_expired(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's cancel between the pass's read of the jobs past their deadline and its
    cancel: the job was reported as expired, though its user's cancel stood."""
    loop, job_id = _running(db, tmp_path, deadline=100)
    with db.session() as s:
        jobs.cancel_job(s, job_id, reason="cancelled by alice", now=NOW + 99)
    late = [(job_id, "deadline passed: not finished 100s after submission")]
    monkeypatch.setattr(jobs, "expired", lambda _session, _t: late)  # read before the cancel
    report = loop.run_once(now=NOW + 100)
    assert report.expired == []
    for t in range(101, 105):
        loop.run_once(now=NOW + t)
    with db.read_session() as s:
        assert jobs.get_job(s, job_id).state == "CANCELLED"
        assert events.list_events(s, job_id)[-1].reason.startswith("cancelled by alice")


def test_a_jobs_delivery_waiting_for_its_next_attempt_is_not_overtaken(db: Database) -> None:
    """A job's PENDING delivery that failed waited for its next attempt while the job's
    CANCELLED one, queued after, was posted at once: the endpoint heard of the cancel first,
    then that the job was pending. Another job's delivery is not held back."""
    heard: list[tuple[str, str]] = []
    answers = [500]

    class Endpoint(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            heard.append((message["event"]["job_id"], message["event"]["new"]))
            self.send_response(answers.pop(0) if answers else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = serve_locally(Endpoint)
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 1, gpu_type("H100")),), NOW)
        webhooks.create(s, url, "admin", states=["PENDING", "CANCELLED"], now=NOW)
        first = jobs.submit(s, {"name": "first", **body}, alice, now=NOW).id
    sender = WebhookSender(db, timeout=5.0)
    try:
        assert sender.run_once(now=NOW) == 1  # answered 500: tried again at NOW + 10
        with db.session() as s:
            jobs.cancel_job(s, first, reason="cancelled by alice", now=NOW + 1)
            other = jobs.submit(s, {"name": "other", **body}, alice, now=NOW + 1).id
        assert sender.run_once(now=NOW + 2) == 1  # the other job's only
        assert heard == [(first, "PENDING"), (other, "PENDING")]
        assert sender.run_once(now=NOW + 10) == 2  # in order once the first is taken
        assert heard[2:] == [(first, "PENDING"), (first, "CANCELLED")]
    finally:
        sender.stop()
        server.shutdown()
        server.server_close()
