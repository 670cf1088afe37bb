"""Webhooks: a state change of a matching job queues a delivery in the change's own
transaction; the sender posts it, signed, to a real HTTP endpoint, retries with a backoff and
gives up after the last attempt; the API (admin only) and the live server's loops."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import live_server, spec, submit, user_and_nodes, wait_for, wait_state
from typer.testing import CliRunner

from danlu.cli import webhook as webhook_cli
from danlu.cli.main import app
from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.errors import SpecError
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, projects, users, webhooks
from danlu.server.webhook_sender import WebhookSender

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


class Receiver:
    """A real HTTP endpoint in a thread: keeps every POST's headers and raw body and answers
    with the next of ``statuses`` (200 once they run out)."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.statuses: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers.items()), body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "7")
                self.end_headers()
                self.wfile.write(b"thanks!" if status < 300 else b"broken!")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/danlu"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    endpoint = Receiver()
    yield endpoint
    endpoint.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _sent(db: Database, webhook_id: str) -> list[tuple[str | None, str]]:
    """The webhook's deliveries, oldest first: (job id, the state it entered)."""
    with db.read_session() as s:
        found = reversed(webhooks.deliveries(s, webhook_id))
        return [(d.job_id, d.payload.get("new", d.kind)) for d in found]


def test_matching_state_changes_are_queued_in_the_transaction_of_the_change(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        bob = users.create_user(s, "bob", now=NOW)
        projects.create_project(s, "research", now=NOW)
        ends = webhooks.create(s, "http://127.0.0.1:9/ends", "admin", now=NOW).id
        starts = webhooks.create(
            s, "http://127.0.0.1:9/starts", "admin", states=["RUNNING"], project="research"
        ).id
        bobs = webhooks.create(
            s, "https://hooks.example/bob", "admin", states=["CANCELLED", "PENDING"], user="bob"
        ).id
        short = jobs.submit(s, {"name": "short", "project": "research", **BODY}, alice, now=NOW)
        long = jobs.submit(s, {"name": "long", **BODY}, bob, now=NOW)
        ids = (short.id, long.id)
    with pytest.raises(RuntimeError), db.session() as s:  # rolled back: nothing to tell
        jobs.submit(s, {"name": "never", **BODY}, users.get_user(s, "bob"), now=NOW)
        raise RuntimeError("the request failed after the submission")
    world = FakeWorld()
    world.script(short.id, duration=5)
    world.script(long.id, duration=1000)
    executor = FakeExecutor(Cluster((NODE,)), world)
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        assert loop.run_once(now=NOW + 1).launched == list(ids)  # the round's batched starts
        for t in range(2, 10):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        with db.session() as s:
            jobs.cancel_job(s, long.id, reason="not needed", now=NOW + 10)
        for t in range(10, 15):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
    finally:
        loop.stop()
    with db.read_session() as s:
        assert [jobs.get_job(s, i).state for i in ids] == ["SUCCEEDED", "CANCELLED"]
    assert _sent(db, ends) == [(short.id, "SUCCEEDED"), (long.id, "CANCELLED")]
    assert _sent(db, starts) == [(short.id, "RUNNING")]  # research's only
    assert _sent(db, bobs) == [(long.id, "PENDING"), (long.id, "CANCELLED")]  # bob's only
    with db.read_session() as s:
        [cancelled] = webhooks.deliveries(s, bobs, limit=1)
        assert cancelled.payload == {
            "job_id": long.id,
            "time": NOW + 11,  # its run stopped at the pass after the cancel
            "old": "RUNNING",
            "new": "CANCELLED",
            "reason": "not needed",
        }
        assert webhooks.counts(s)[cancelled.webhook_seq].pending == 2


def test_the_sender_posts_signed_messages_and_retries_until_one_is_taken(
    db: Database, receiver: Receiver
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        hook = webhooks.create(s, receiver.url, "admin", states=["PENDING"], now=NOW)
        hook_id, secret = hook.id, hook.secret
        job_id = jobs.submit(s, {"name": "hello", **BODY}, alice, now=NOW).id
    receiver.statuses = [500]
    sender = WebhookSender(db, timeout=5.0)
    try:
        assert sender.run_once(now=NOW) == 1
        with db.read_session() as s:
            [first] = webhooks.deliveries(s, hook_id)
            assert (first.attempts, first.delivered, first.done_at) == (1, False, None)
            assert (first.status_code, first.last_error) == (500, "HTTP 500: broken!")
            assert first.next_attempt_at == NOW + webhooks.FIRST_BACKOFF_SECONDS
        assert sender.run_once(now=NOW + 9) == 0  # not due yet
        assert sender.run_once(now=NOW + 10) == 1
        assert sender.run_once(now=NOW + 100) == 0  # taken: never sent again
        with db.read_session() as s:
            [taken] = webhooks.deliveries(s, hook_id)
            assert (taken.attempts, taken.delivered, taken.done_at) == (2, True, NOW + 10)
            assert (taken.status_code, taken.last_error) == (200, None)
            assert webhooks.counts(s)[taken.webhook_seq] == webhooks.Counts(delivered=1)
    finally:
        sender.stop()
    assert len(receiver.requests) == 2
    for headers, body in receiver.requests:
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        assert headers["X-Danlu-Signature"] == expected
        assert headers["X-Danlu-Event"] == "job.state"
        assert headers["Content-Type"] == "application/json"
    messages = receiver.messages()
    assert messages[0]["delivery"] == messages[1]["delivery"]  # the same delivery, twice
    assert int(receiver.requests[1][0]["X-Danlu-Delivery"]) == messages[1]["delivery"]
    message = messages[1]
    assert (message["type"], message["webhook"]) == ("job.state", hook_id)
    assert message["time"] == NOW + 10
    assert message["event"] == {
        "job_id": job_id,
        "time": NOW,
        "old": None,
        "new": "PENDING",
        "reason": "submitted by alice",
    }
    job = message["job"]
    assert (job["id"], job["name"], job["project"], job["user"]) == (
        job_id,
        "hello",
        "default",
        "alice",
    )
    assert job["state"] == "PENDING" and job["submitted_at"] == NOW


def test_an_endpoint_that_never_answers_is_given_up_on_then_forgotten(db: Database) -> None:
    with db.session() as s:
        hook = webhooks.create(s, f"http://127.0.0.1:{_closed_port()}/x", "admin", now=NOW)
        hook_id = hook.id
        webhooks.ping(s, hook_id, now=NOW)
    sender = WebhookSender(db, timeout=2.0)
    t = NOW
    try:
        for attempt in range(1, webhooks.MAX_ATTEMPTS + 1):
            assert sender.run_once(now=t) == 1, attempt
            t += webhooks.backoff(attempt)
        assert sender.run_once(now=t + 86400) == 0  # given up: no more attempts
        with db.read_session() as s:
            [given_up] = webhooks.deliveries(s, hook_id)
            assert (given_up.kind, given_up.attempts) == ("ping", webhooks.MAX_ATTEMPTS)
            assert given_up.done_at is not None and not given_up.delivered
            assert given_up.status_code is None
            assert (given_up.last_error or "").startswith("ConnectError")
            tally = webhooks.counts(s)[given_up.webhook_seq]
            assert (tally.pending, tally.delivered, tally.failed) == (0, 0, 1)
            assert tally.last_error == given_up.last_error
            done_at = given_up.done_at
        sender.run_once(now=done_at + webhooks.KEEP_DONE_SECONDS - 1)
        assert _sent(db, hook_id) == [(None, "ping")]  # kept a week
        sender.run_once(now=done_at + webhooks.KEEP_DONE_SECONDS + webhooks.KEEP_DONE_SECONDS)
        assert _sent(db, hook_id) == []
    finally:
        sender.stop()
    # the backoff doubles from 10 s and stops growing at an hour
    assert [webhooks.backoff(n) for n in (1, 2, 3, 9, 10, 11)] == [10, 20, 40, 2560, 3600, 3600]


def test_a_stored_host_the_transport_cannot_encode_is_still_a_failed_attempt(
    db: Database,
) -> None:
    """A URL stored before the check (``xn--a`` fails in the IDNA codec when posted, a
    UnicodeError, not an httpx error) still counts as an attempt and does not escape the
    sender's pass."""
    with pytest.raises(SpecError, match="host"):
        webhooks.check_url("http://xn--a/x")
    with db.session() as s:
        hook = webhooks.create(s, "http://hooks.example/x", "admin", now=NOW)
        hook.url = "http://xn--a/x"  # as an older control plane let it be stored
        webhooks.ping(s, hook.id, now=NOW)
        hook_id = hook.id
    sender = WebhookSender(db, timeout=2.0)
    try:
        assert sender.run_once(now=NOW) == 1
    finally:
        sender.stop()
    with db.read_session() as s:
        [tried] = webhooks.deliveries(s, hook_id)
        assert (tried.attempts, tried.done_at, tried.lock_token) == (1, None, None)
        assert "Codepoint" in (tried.last_error or ""), tried.last_error


def test_a_claimed_delivery_is_not_claimed_twice_and_a_lost_lock_writes_nothing(
    db: Database,
) -> None:
    with db.session() as s:
        hook_id = webhooks.create(s, "http://127.0.0.1:9/x", "admin", now=NOW).id
        webhooks.ping(s, hook_id, now=NOW)
    with db.session() as s:
        mine = webhooks.claim_due(s, "sender-a", 60.0, NOW, 10)
    b_steady = [0.0]  # sender b's steady clock
    b_watch = webhooks.ClaimWatch(lambda: b_steady[0])
    with db.session() as s:
        assert webhooks.claim_due(s, "sender-b", 60.0, NOW + 1, 10, watch=b_watch) == []
    assert len(mine) == 1
    with db.session() as s:  # b holds no lock: its outcome is dropped
        assert not webhooks.record(s, mine[0], "sender-b", NOW, status_code=200, error=None)
    b_steady[0] = 60.0
    with db.session() as s:  # a's claim unchanged for its TTL (a died mid-post): b takes it
        assert webhooks.claim_due(s, "sender-b", 60.0, NOW + 61, 10, watch=b_watch) == mine
    with db.session() as s:
        assert not webhooks.record(s, mine[0], "sender-a", NOW + 62, status_code=200, error=None)
        webhooks.remove(s, hook_id)
    with db.session() as s:  # the webhook went meanwhile
        assert not webhooks.record(s, mine[0], "sender-b", NOW + 63, status_code=200, error=None)
        assert webhooks.list_webhooks(s) == []


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"url": "ftp://files.example/x"}, "url", r"is not an http\(s\) URL"),
        ({"url": "hooks.example/x"}, "url", r"is not an http\(s\) URL"),
        ({"url": "http://a b/"}, "url", "spaces"),
        ({"url": "http://host:99999/"}, "url", "the port must be between 1 and 65535"),
        ({"url": "http://\u2603.example/"}, "url", "is not a URL: Invalid IDNA hostname"),
        ({"url": "http://h/" + "x" * 2048}, "url", "at most 2048"),
        ({"states": ["RUNNING", "DONE"]}, "states.1", "'DONE' is not a job state; one of PENDING"),
    ],
)
def test_a_bad_webhook_is_refused_naming_the_field(
    db: Database, fields: dict[str, Any], field: str, message: str
) -> None:
    with db.session() as s, pytest.raises(SpecError, match=message) as info:
        webhooks.create(s, **({"url": "http://h/", "creator": "admin"} | fields))
    assert info.value.field == field


def test_webhooks_name_existing_projects_and_users_and_are_bounded(db: Database) -> None:
    with db.session() as s:
        # a 422 naming the field, as docs/api.md says of this route's errors (not a 404)
        with pytest.raises(SpecError, match="project 'nope' not found") as raised:
            webhooks.create(s, "http://h/", "admin", project="nope")
        assert raised.value.field == "project"
        with pytest.raises(SpecError, match="user 'nobody' not found") as raised:
            webhooks.create(s, "http://h/", "admin", user="nobody")
        assert raised.value.field == "user"
        hook = webhooks.create(s, "http://h/", "admin", states=["FAILED", "PENDING"])
        assert hook.states == ["PENDING", "FAILED"]  # the state table's order
        for _ in range(webhooks.MAX_WEBHOOKS - 1):
            webhooks.create(s, "http://h/", "admin")
        with pytest.raises(SpecError, match="there are 100 webhooks already"):
            webhooks.create(s, "http://h/", "admin")


def test_the_live_server_tells_an_endpoint_of_a_real_job_and_only_admins_manage_hooks(
    tmp_path: Path, receiver: Receiver
) -> None:
    with live_server(tmp_path) as live, live.client() as admin:
        response = admin.post("/users", json={"name": "bob"})
        assert response.status_code == 201, response.text
        bob_token = admin.post("/users/bob/tokens", json={"name": "t"}).json()["token"]
        with live.client(bob_token) as bob:
            assert bob.post("/webhooks", json={"url": receiver.url}).status_code == 403
            assert bob.get("/webhooks").status_code == 403
        bad = admin.post("/webhooks", json={"url": "file:///etc/passwd"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "url"
        bad = admin.post("/webhooks", json={"url": receiver.url, "states": ["DONE"]})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "states.0"
        flags = ["--url", live.url, "--token", live.token]
        added = CliRunner().invoke(
            app, ["webhook", "add", receiver.url, "--state", "succeeded", "--json", *flags]
        )
        assert added.exit_code == 0, added.stderr
        hook = json.loads(added.stdout)
        assert hook["states"] == ["SUCCEEDED"] and len(hook["secret"]) == 64
        job = submit(admin, spec("quick", "print('done')"))
        wait_state(admin, job["id"], "SUCCEEDED")
        wait_for(lambda: receiver.messages(), timeout=30)
        [message] = receiver.messages()
        assert message["event"]["job_id"] == job["id"] and message["job"]["state"] == "SUCCEEDED"
        headers, body = receiver.requests[0]
        signature = hmac.new(hook["secret"].encode(), body, hashlib.sha256).hexdigest()
        assert headers["X-Danlu-Signature"] == f"sha256={signature}"
        ping = CliRunner().invoke(app, ["webhook", "ping", hook["id"], *flags])
        assert ping.exit_code == 0 and f"to webhook {hook['id']}" in ping.stdout, ping.stderr
        wait_for(lambda: len(receiver.requests) == 2, timeout=30)
        assert receiver.messages()[1]["type"] == "ping"
        listed = admin.get("/webhooks").json()
        assert [(h["id"], h["delivered"], h["pending"], h["failed"]) for h in listed] == [
            (hook["id"], 2, 0, 0)
        ]
        assert "secret" not in listed[0] or listed[0]["secret"] is None
        sent = admin.get(f"/webhooks/{hook['id']}/deliveries").json()
        assert [(d["kind"], d["delivered"], d["status_code"]) for d in sent] == [
            ("ping", True, 200),
            ("job.state", True, 200),
        ]
        table = CliRunner().invoke(app, ["webhook", "ls", *flags])
        assert table.exit_code == 0 and "webhooks" in table.stdout, table.stderr
        assert hook["id"] in table.stdout  # whole, on the runner's 80 columns
        listed_json = CliRunner().invoke(app, ["webhook", "ls", "--json", *flags])
        assert json.loads(listed_json.stdout) == listed
        table = CliRunner().invoke(app, ["webhook", "deliveries", hook["id"], *flags])
        assert table.exit_code == 0 and f"deliveries of webhook {hook['id']}" in table.stdout
        assert [webhook_cli.describe(d) for d in sent] == [
            ("ping", "delivered (HTTP 200)"),
            (f"job {job['id']} -> SUCCEEDED", "delivered (HTTP 200)"),
        ]
        metrics = httpx.get(f"{live.url}/metrics").text
        for outcome, count in (("pending", 0), ("delivered", 2), ("failed", 0)):
            line = f'danlu_webhook_deliveries{{outcome="{outcome}",webhook="{hook["id"]}"}}'
            assert f"{line} {count:.1f}" in metrics, metrics
        removed = CliRunner().invoke(app, ["webhook", "rm", hook["id"], *flags])
        assert removed.exit_code == 0 and f"removed webhook {hook['id']}" in removed.stdout
        assert admin.get("/webhooks").json() == []
        gone = CliRunner().invoke(app, ["webhook", "rm", hook["id"], *flags])
        assert gone.exit_code == 2 and f"webhook '{hook['id']}' not found" in gone.stderr
        assert admin.delete(f"/webhooks/{hook['id']}").status_code == 404


def test_the_cli_tells_each_deliverys_outcome() -> None:
    ping = {"kind": "ping", "event": {}, "delivered": False, "status_code": None}
    queued = ping | {"attempts": 0, "done_at": None, "last_error": None}
    retrying = ping | {"attempts": 2, "done_at": None, "last_error": "HTTP 502"}
    given_up = ping | {"attempts": 12, "done_at": NOW, "last_error": "ConnectError: refused"}
    assert webhook_cli.describe(queued) == ("ping", "queued")
    assert webhook_cli.describe(retrying | {"next_attempt_at": NOW})[1].endswith(": HTTP 502")
    assert webhook_cli.describe(given_up) == ("ping", "given up: ConnectError: refused")
