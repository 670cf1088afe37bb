"""danlu.train's reporter: a request the server refuses (422) for one record
lost every record of the flush. The reporter leaves out what the API would refuse before it
sends (warning once per field and reason) and, when a server still refuses a request naming
``metrics.<i>``, drops that record alone and sends the rest again (at most once per
record)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from danlu.train.report import MetricsReporter

Refusal = Callable[[list[dict[str, Any]]], tuple[int, dict[str, Any]] | None]
"""Given a request's records: ``None`` to store them all (answered 200), else the status and
the JSON body to answer."""


class _Api:
    """A metrics endpoint in a thread: every POST's records in :attr:`posts`, the stored
    ones in :attr:`stored`; ``refuse`` decides a request's fate."""

    def __init__(self, refuse: Refusal) -> None:
        self.posts: list[list[dict[str, Any]]] = []
        self.stored: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                records = body["metrics"]
                api.posts.append(records)
                refusal = refuse(records)
                if refusal is None:
                    api.stored.extend(records)
                    status, reply = 200, {"accepted": len(records), "batch_size": None}
                else:
                    status, reply = refusal
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/api/v1/jobs/j/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _error(field: str | None, message: str) -> tuple[int, dict[str, Any]]:
    """A 422 as the API answers it (docs/api.md)."""
    return 422, {"error": {"type": "SpecError", "field": field, "message": message}}


def _no_secrets(records: list[dict[str, Any]]) -> tuple[int, dict[str, Any]] | None:
    """A server with a rule the reporter cannot know: no value named ``secret``."""
    for i, record in enumerate(records):
        if "secret" in record:
            return _error(f"metrics.{i}.secret", "this server takes no secrets")
    return None


@pytest.fixture
def strict() -> Iterator[_Api]:
    api = _Api(_no_secrets)
    yield api
    api.close()


def _steps(records: list[dict[str, Any]]) -> list[int]:
    return [int(r["step"]) for r in records]


def test_a_refusal_naming_a_record_drops_that_record_alone(
    strict: _Api, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = MetricsReporter(url=strict.url, interval_s=3600)
    with caplog.at_level(logging.DEBUG, logger="danlu.train"):
        for step in range(1, 6):
            record: dict[str, Any] = {"step": step, "loss": 1.0 / step}
            if step in (2, 4):
                record["secret"] = "x"
            reporter.report(record)
        reporter.flush()
    assert _steps(strict.stored) == [1, 3, 5]
    assert [_steps(p) for p in strict.posts] == [[1, 2, 3, 4, 5], [1, 3, 4, 5], [1, 3, 5]]
    assert (reporter.sent, reporter.dropped, reporter.errors) == (3, 2, 2)
    assert reporter._retry == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # one reason: one warning
    assert "secret" in warnings[0] and "this server takes no secrets" in warnings[0]


def test_the_resends_are_bounded_by_the_records() -> None:
    """A server that refuses every request naming its first record: each resend drops one
    record, so a chunk of n records takes n requests at most, and nothing is kept."""
    api = _Api(lambda records: _error("metrics.0.loss", "never"))
    try:
        reporter = MetricsReporter(url=api.url, interval_s=3600)
        for step in range(1, 5):
            reporter.report({"step": step, "loss": 0.5})
        reporter.flush()
    finally:
        api.close()
    assert [_steps(p) for p in api.posts] == [[1, 2, 3, 4], [2, 3, 4], [3, 4], [4]]
    assert (reporter.sent, reporter.dropped, reporter._retry) == (0, 4, [])


REFUSALS: dict[str, tuple[int, dict[str, Any]]] = {
    "no-field": _error(None, "nope"),
    "the-batch": _error("metrics", "at most 1000 records per request"),
    "the-body": _error("body", "the body is not valid JSON"),
    "index-out-of-range": _error("metrics.7.loss", "nope"),
    "not-an-index": _error("metrics.x.loss", "nope"),
    "a-403": (403, {"error": {"type": "PermissionDenied", "field": None, "message": "no"}}),
    "not-json": (422, {"text": "garbage"}),
}


@pytest.mark.parametrize("refusal", list(REFUSALS.values()), ids=list(REFUSALS))
def test_a_refusal_naming_no_record_drops_the_request_as_before(
    refusal: tuple[int, dict[str, Any]],
) -> None:
    api = _Api(lambda records: refusal)
    try:
        reporter = MetricsReporter(url=api.url, interval_s=3600)
        for step in range(1, 4):
            reporter.report({"step": step})
        reporter.flush()
    finally:
        api.close()
    assert len(api.posts) == 1
    assert (reporter.sent, reporter.dropped, reporter.errors, reporter._retry) == (0, 3, 1, [])


def test_records_the_api_refuses_warn_once_per_reason(
    strict: _Api, caplog: pytest.LogCaptureFixture
) -> None:
    """A script reporting ``time`` in milliseconds at every step gets one warning, not one
    per record (the times differ); another fault gets its own."""
    reporter = MetricsReporter(url=strict.url, interval_s=3600)
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        for step in range(1, 51):
            reporter.report({"step": step, "time": 1.7e12 + step, "loss": 0.5})
            reporter.report({"step": step, "loss": 0.5, "lr_groups": [0.1, float(step)]})
            reporter.report({"step": step, "loss": 0.5})
        reporter.flush()
        reporter.report({"step": 51, "time": 1.7e12 + 51})
        reporter.flush()
    assert (reporter.sent, reporter.dropped, reporter.errors) == (50, 101, 0)
    assert _steps(strict.stored) == list(range(1, 51))
    assert len(strict.posts) == 1  # a flush left with nothing to send posts nothing
    warnings = sorted(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert len(warnings) == 2, warnings
    assert "lr_groups" in warnings[0] and "numbers, strings, booleans or null" in warnings[0]
    assert "time" in warnings[1] and "milliseconds" in warnings[1]


def test_a_network_failure_after_a_refusal_keeps_only_the_records_not_dropped() -> None:
    """The record the server named is dropped for good: the records kept for the next
    flush (the server went away meanwhile) are the others."""
    calls: list[int] = []

    def refuse_then_fail(records: list[dict[str, Any]]) -> tuple[int, dict[str, Any]] | None:
        calls.append(len(records))
        if len(calls) == 1:
            return _error("metrics.1.secret", "no secrets")
        return 503, {"error": {"type": "http", "field": None, "message": "busy"}}

    api = _Api(refuse_then_fail)
    try:
        reporter = MetricsReporter(url=api.url, interval_s=3600)
        reporter.report({"step": 1})
        reporter.report({"step": 2, "secret": 1})
        reporter.report({"step": 3})
        reporter.flush()
    finally:
        api.close()
    assert calls == [3, 2]
    assert (reporter.sent, reporter.dropped, reporter.errors) == (0, 1, 2)
    assert _steps(reporter._retry) == [1, 3]


def test_a_jsonl_file_keeps_what_the_api_would_refuse(tmp_path: Path) -> None:
    """The checks are the API's: a metrics file takes any record JSON can write."""
    path = tmp_path / "m.jsonl"
    reporter = MetricsReporter(path=path)
    reporter.report({"step": 1, "lr_groups": [0.1, 0.01]})
    reporter.flush()
    assert (reporter.sent, reporter.dropped) == (1, 0)
    assert json.loads(path.read_text()) == {"step": 1, "lr_groups": [0.1, 0.01]}
