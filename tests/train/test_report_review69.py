"""danlu.train's reporter.

1. A POST answered with a redirect (301/302/303: a TLS proxy sending ``http://`` to
   ``https://``) was followed as a GET, and a 2xx that is not the API's reply (an SSO login
   page) was taken as stored: the records were counted as sent and lost, with no WARNING. A
   redirect is never followed now and such a reply is a failure: the records are kept and
   retried, with the outage's WARNING naming what answered.
2. A 413 (the control plane's ``DANLU_MAX_BODY_BYTES``) dropped whole requests of up to 1,000
   records. The request is split in halves now (down to one record; a record still too
   large is left out, with a WARNING naming its step and size) and later requests are as
   small as the halves that went through.
3. :meth:`MetricsReporter.close` worked through the whole backlog however slow the control
   plane was (47 s for 10,000 records), on the preemption path inside the grace. It stops
   after ``close_timeout_s`` now and tells how many records it left unsent.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from danlu.train.report import MetricsReporter

PATH = "/api/v1/jobs/j/metrics"


@dataclass
class _Clock:
    """A clock the server moves on as it answers (a slow control plane without waiting)."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class _Api:
    """A metrics endpoint in a thread that remembers keys as the API does (a key stored
    already is answered again and stores nothing). ``mode``: ``"store"``, ``"r301"`` (any
    ``r<code>``: a redirect to the same address), ``"html"`` (an SSO page, 200),
    ``"list"`` (a 200 JSON list, what ``GET`` answers), ``"empty"`` (200 ``{}``),
    ``"text-accepted"`` (``accepted`` a string), ``"204"`` (no content). ``max_body``: a
    larger body is a 413. ``clock``/``delay``: each POST moves the clock on by ``delay``."""

    mode: str = "store"
    max_body: int | None = None
    clock: _Clock | None = None
    delay: float = 0.0
    statuses: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    keys: dict[str, int] = field(default_factory=dict)
    stored: list[int] = field(default_factory=list)
    gets: int = 0
    url: str = ""
    server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if api.clock is not None:
                    api.clock.now += api.delay
                key = str(self.headers.get("Idempotency-Key"))
                status, ctype, data, location = api._answer(key, body)
                api.statuses.append(status)
                api.sizes.append(len(body))
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                if ctype:
                    self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                api.gets += 1
                data = b"[]"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}{PATH}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _answer(self, key: str, body: bytes) -> tuple[int, str, bytes, str]:
        """(status, content type, body, Location) of the answer to a POST of ``body`` named
        ``key``."""
        if self.max_body is not None and len(body) > self.max_body:
            return 413, "application/json", b'{"error": {"message": "too large"}}', ""
        if self.mode.startswith("r"):
            return int(self.mode[1:]), "", b"", self.url
        other = {
            "html": (200, "text/html", b"<html>please log in</html>"),
            "list": (200, "application/json", b"[]"),
            "empty": (200, "application/json", b"{}"),
            "text-accepted": (200, "application/json", b'{"accepted": "3"}'),
            "204": (204, "", b""),
        }
        if self.mode in other:
            status, ctype, data = other[self.mode]
            return status, ctype, data, ""
        steps = [int(r["step"]) for r in json.loads(body)["metrics"]]
        if key not in self.keys:
            self.keys[key] = len(steps)
            self.stored.extend(steps)
        reply = {"accepted": self.keys[key], "batch_size": None}
        return 200, "application/json", json.dumps(reply).encode(), ""

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def api() -> Iterator[_Api]:
    server = _Api()
    server.start()
    yield server
    server.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def _flushed_twice(api: _Api, caplog: pytest.LogCaptureFixture) -> MetricsReporter:
    """A reporter of 50 records (steps 0-49) to ``api``, flushed twice, its WARNINGs in
    ``caplog``."""
    reporter = MetricsReporter(url=api.url, interval_s=3600)
    for step in range(50):
        reporter.report({"step": step, "loss": 0.1})
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        reporter.flush()
        reporter.flush()
    return reporter


# ---------------------------------------------------------------- 1: redirects, other replies
@pytest.mark.parametrize("code", [301, 302, 303, 307, 308], ids=str)
def test_a_redirect_is_never_followed_and_the_records_are_kept(
    api: _Api, code: int, caplog: pytest.LogCaptureFixture
) -> None:
    api.mode = f"r{code}"
    reporter = _flushed_twice(api, caplog)
    assert api.gets == 0  # the POST was not re-sent as a GET
    assert reporter.sent == 0 and reporter.dropped == 0 and reporter.errors == 2
    assert len(reporter._retry) == 50
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings  # once for the outage
    assert f"redirected the POST (HTTP {code}) to {api.url}" in warnings[0]
    assert "DANLU_API_URL" in warnings[0] and "https://" in warnings[0]
    api.mode = "store"  # DANLU_API_URL fixed / the proxy passes it on
    reporter.flush()
    assert sorted(api.stored) == list(range(50)) and reporter.sent == 50


@pytest.mark.parametrize("mode", ["html", "list", "empty", "text-accepted", "204"], ids=str)
def test_a_2xx_that_is_not_the_apis_reply_keeps_the_records(
    api: _Api, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    api.mode = mode
    reporter = _flushed_twice(api, caplog)
    assert reporter.sent == 0 and reporter.dropped == 0 and reporter.errors == 2
    assert len(reporter._retry) == 50
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert api.url in warnings[0] and "not danlu's API" in warnings[0]
    assert "DANLU_API_URL" in warnings[0]
    api.mode = "store"
    reporter.flush()
    assert sorted(api.stored) == list(range(50)) and reporter.sent == 50


# ---------------------------------------------------------------- 2: 413
def _record(step: int) -> dict[str, float]:
    """A record of about 130 bytes as JSON."""
    return {"step": step, "loss": 0.123456789, "lr": 0.001, "grad_norm": 1.2345678, "x": 1.5}


def test_a_413_splits_the_request_until_it_fits_and_later_ones_are_smaller(
    api: _Api, caplog: pytest.LogCaptureFixture
) -> None:
    api.max_body = 1024  # the least DANLU_MAX_BODY_BYTES takes
    reporter = MetricsReporter(url=api.url, interval_s=3600)
    for step in range(1000):
        reporter.report(_record(step))
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        reporter.flush()
    assert sorted(api.stored) == list(range(1000))  # nothing dropped, nothing twice
    assert reporter.sent == 1000 and reporter.dropped == 0 and not reporter._retry
    assert all(size <= 1024 for size, s in zip(api.sizes, api.statuses, strict=True) if s == 200)
    first = api.statuses.count(413)
    assert first > 0 and reporter.errors == first  # each a request refused, none lost
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "HTTP 413" in warnings[0], warnings
    for step in range(1000, 1300):
        reporter.report(_record(step))
    reporter.flush()
    assert api.statuses.count(413) == first  # the smaller size is remembered
    assert sorted(api.stored) == list(range(1300)) and reporter.sent == 1300


def test_a_record_too_large_alone_is_left_out_naming_its_step_and_size(
    api: _Api, caplog: pytest.LogCaptureFixture
) -> None:
    api.max_body = 1024
    reporter = MetricsReporter(url=api.url, interval_s=3600)
    for step in range(20):
        reporter.report(_record(step))
    huge = {"step": 7_777, **{f"metric_{i}": float(i) for i in range(100)}}
    reporter.report(huge)
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        reporter.flush()
    assert sorted(api.stored) == list(range(20))
    assert reporter.sent == 20 and reporter.dropped == 1 and not reporter._retry
    size = len(('{"metrics": [' + json.dumps(huge) + "]}").encode())
    left_out = [w for w in _warnings(caplog) if "left out" in w]
    assert len(left_out) == 1 and "step 7777" in left_out[0], left_out
    assert f"{size} bytes" in left_out[0] and "DANLU_MAX_BODY_BYTES" in left_out[0]


def test_a_split_request_resent_by_a_resumed_run_is_stored_once(api: _Api) -> None:
    """A checkpoint keeps a request whole; the first run sends its halves, the resumed run
    sends it again and splits it the same way: the halves' keys are the same, the API
    stores nothing twice."""
    api.max_body = 1024
    before = MetricsReporter(url=api.url, interval_s=3600)
    for step in range(40):
        before.report(_record(step))
    pending = before.seal()
    before.flush()
    assert sorted(api.stored) == list(range(40))
    after = MetricsReporter(url=api.url, interval_s=3600)
    assert after.resend(pending) == 40
    after.flush()
    assert sorted(api.stored) == list(range(40)) and not after._retry


# ---------------------------------------------------------------- 3: close is bounded
def test_close_stops_at_its_deadline_and_tells_what_it_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """10,000 records waiting, a control plane answering each request after 4.5 s: close
    makes as many requests as fit in ``close_timeout_s`` (the clock is the server's)."""
    clock = _Clock()
    api = _Api(clock=clock, delay=4.5)
    api.start()
    try:
        reporter = MetricsReporter(url=api.url, interval_s=3600, close_timeout_s=10.0, clock=clock)
        reporter.start()
        for step in range(10_000):
            reporter.report({"step": step, "loss": 0.1})
        with caplog.at_level(logging.WARNING, logger="danlu.train"):
            reporter.close()
    finally:
        api.close()
    assert len(api.statuses) == 3  # at 0, 4.5 and 9 s: the next would start after 10 s
    assert reporter.sent == 3000 and len(api.stored) == 3000
    assert len(reporter._retry) == 7000  # kept as they were (a checkpoint has sealed them)
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "7000 metric records were left unsent" in warnings[0]
    assert "close_timeout_s=10" in warnings[0]


def test_close_with_everything_shipped_says_nothing(
    api: _Api, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = MetricsReporter(url=api.url, interval_s=3600)
    reporter.start()
    for step in range(10):
        reporter.report({"step": step})
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        reporter.close()
    assert sorted(api.stored) == list(range(10)) and not _warnings(caplog)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")], ids=repr)
def test_a_close_timeout_that_is_not_a_positive_number_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="close_timeout_s"):
        MetricsReporter(url="http://127.0.0.1:9/m", close_timeout_s=bad)
