"""danlu.train's reporter: a request that timed out on the reporter but was
stored by the server was sent again, so its records were stored twice. Each request now
carries an ``Idempotency-Key``; a request whose fate is unknown is sent again as it was (the
same records, body and key, not merged with the records reported since), and a request whose
records changed (one the server refused dropped) gets a new key."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from danlu.train.report import MAX_RECORDS_PER_POST, MetricsReporter

KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""What the API takes as an ``Idempotency-Key`` (docs/api.md)."""
LIMIT = 30.0
"""Seconds a test waits for the server's thread at most (a guard against a hang only)."""


@dataclass
class _Post:
    key: str | None
    body: bytes
    steps: list[int]


@dataclass
class _Api:
    """A metrics endpoint that remembers keys as the API does: a repeated key is answered
    with the first reply and stores nothing. ``stall`` makes the next request wait for
    ``release`` before it stores (the reporter times out meanwhile); ``answers`` are statuses
    to answer (and not store) the next requests with."""

    posts: list[_Post] = field(default_factory=list)
    stored: list[int] = field(default_factory=list)
    keys: dict[str, int] = field(default_factory=dict)
    answers: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    stall: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    url: str = ""
    server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                key = self.headers.get("Idempotency-Key")
                steps = [int(r["step"]) for r in json.loads(body)["metrics"]]
                api.posts.append(_Post(key, body, steps))
                status, reply = api._answer(key, steps)
                data = json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the reporter timed out and left
                    pass
                finally:
                    api.done.set()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/api/v1/jobs/j/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _answer(self, key: str | None, steps: list[int]) -> tuple[int, dict[str, Any]]:
        if self.answers:
            return self.answers.pop(0)
        if self.stall:
            self.stall = False
            assert self.release.wait(LIMIT), "the test never released the request"
        if key is not None and key in self.keys:
            return 200, {"accepted": self.keys[key], "batch_size": None}
        self.stored.extend(steps)
        if key is not None:
            self.keys[key] = len(steps)
        return 200, {"accepted": len(steps), "batch_size": None}

    def close(self) -> None:
        assert self.server is not None
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[_Api]:
    server = _Api()
    server.start()
    yield server
    server.close()


def _report(reporter: MetricsReporter, steps: range) -> None:
    for step in steps:
        reporter.report({"step": step, "loss": 1.0 / step})


def test_a_timed_out_request_is_sent_again_with_its_key_and_stored_once(api: _Api) -> None:
    """The reviewer's case, with records reported between the flushes: the request that
    timed out is sent again alone, byte for byte under its key (the server answers it as a
    repeat), and the new records go in a request of their own, under a new key."""
    reporter = MetricsReporter(url=api.url, interval_s=3600, timeout_s=0.5)
    _report(reporter, range(1, 4))
    api.stall = True
    reporter.flush()  # times out; the server stores the records once released
    assert (reporter.sent, reporter.errors) == (0, 1)
    api.release.set()
    assert api.done.wait(LIMIT)
    _report(reporter, range(4, 6))
    reporter.flush()
    first, again, new = api.posts
    assert first.key is not None and KEY.fullmatch(first.key), first.key
    assert (again.key, again.body) == (first.key, first.body)
    assert new.key is not None and new.key != first.key
    assert [p.steps for p in api.posts] == [[1, 2, 3], [1, 2, 3], [4, 5]]
    assert api.stored == [1, 2, 3, 4, 5]
    assert (reporter.sent, reporter.errors, reporter.dropped) == (5, 1, 0)


def test_a_server_error_sends_the_same_request_again(api: _Api) -> None:
    """A 503 (or a gateway's 504 after the server stored the records): the same request,
    with its key, at the next flush."""
    api.answers = [(503, {"error": {"type": "http", "field": None, "message": "busy"}})]
    reporter = MetricsReporter(url=api.url, interval_s=3600)
    _report(reporter, range(1, 3))
    reporter.flush()
    _report(reporter, range(3, 4))
    reporter.flush()
    first, again, new = api.posts
    assert (again.key, again.body) == (first.key, first.body)
    assert [p.steps for p in api.posts] == [[1, 2], [1, 2], [3]]
    assert new.key not in (None, first.key)
    assert api.stored == [1, 2, 3]


def test_every_request_has_its_own_key(api: _Api) -> None:
    reporter = MetricsReporter(url=api.url, interval_s=3600)
    _report(reporter, range(1, MAX_RECORDS_PER_POST + 3))
    reporter.flush()
    _report(reporter, range(MAX_RECORDS_PER_POST + 3, MAX_RECORDS_PER_POST + 5))
    reporter.flush()
    keys = [p.key for p in api.posts]
    assert len(keys) == 3 and len(set(keys)) == 3
    assert all(k is not None and KEY.fullmatch(k) for k in keys), keys
    assert api.stored == list(range(1, MAX_RECORDS_PER_POST + 5))


def test_a_request_whose_records_changed_gets_a_new_key(api: _Api) -> None:
    """A 422 naming record 1: the rest is sent at once, under a new key (its body is not
    the refused one's)."""
    refusal = {"error": {"type": "SpecError", "field": "metrics.1.loss", "message": "no"}}
    api.answers = [(422, refusal)]
    reporter = MetricsReporter(url=api.url, interval_s=3600)
    _report(reporter, range(1, 4))
    reporter.flush()
    refused, rest = api.posts
    assert [refused.steps, rest.steps] == [[1, 2, 3], [1, 3]]
    assert rest.key not in (None, refused.key)
    assert api.stored == [1, 3]
    assert (reporter.sent, reporter.dropped) == (2, 1)


def test_a_request_in_doubt_is_dropped_whole_on_overflow(api: _Api) -> None:
    """Past ``max_pending`` the oldest records go: a request in doubt goes whole (part of it
    under a new key could store its records twice), never sent again cut down."""
    busy = (503, {"error": {"type": "http", "field": None, "message": "busy"}})
    api.answers = [busy, busy]
    reporter = MetricsReporter(url=api.url, interval_s=3600, max_pending=4)
    _report(reporter, range(1, 4))
    reporter.flush()  # [1, 2, 3] in doubt
    _report(reporter, range(4, 6))
    reporter.flush()  # in doubt again, and 5 records pending: the request goes
    reporter.flush()
    assert [p.steps for p in api.posts] == [[1, 2, 3], [1, 2, 3], [4, 5]]
    assert api.posts[2].key not in (None, api.posts[0].key)
    assert api.stored == [4, 5]
    assert (reporter.sent, reporter.dropped) == (2, 3)
