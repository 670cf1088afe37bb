"""The client reading a job's log:

1. ``read_log_bytes`` (``danlu logs JOB``) against a server that ignores ``offset`` (a proxy
   answering its page to every request, without ``X-Danlu-Log-Offset``) read on by the
   page's length for ever, yielding the page each time; a reply with bytes but no offset
   header, or one not past the offset asked for, is now a :class:`ServerError` saying so,
   its bytes not yielded.
2. A log follow read its stream with no read timeout: a half-open connection (the server's
   host or a NAT gone without a word) blocked it for ever. It now waits at most
   ``follow_read_timeout`` seconds for more bytes, then opens the follow again from the last
   byte received, as when the server's follow timeout ends a stream (the server sends
   nothing while a job is quiet, so such an end is no lost server: no ``reconnect_for``).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import httpx
import pytest
from local_http import serving

from danlu.client import Client, ServerError
from danlu.client.rest import LOG_OFFSET_HEADER
from danlu.core.errors import SpecError

URL = "http://danlu.test"
PAGE = b"<html><body>Sign in to continue</body></html>\n"


def client(handler: Callable[[httpx.Request], httpx.Response], **kwargs: Any) -> Client:
    return Client(URL, "tok", transport=httpx.MockTransport(handler), **kwargs)


# -- 1. a server that ignores the log offset -------------------------------------------------


def _proxy_page(asked: list[int]) -> Callable[[httpx.Request], httpx.Response]:
    """A proxy's page for every request (no offset header); after 50 requests an empty
    reply, so that a reader that never stops ends the test instead of hanging it."""

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(int(request.url.params.get("offset", "0")))
        if len(asked) > 50:
            return httpx.Response(200, content=b"")
        return httpx.Response(200, content=PAGE, headers={"Content-Type": "text/html"})

    return handler


def test_a_log_read_without_offset_headers_ends_with_a_server_error() -> None:
    asked: list[int] = []
    read: list[bytes] = []
    with client(_proxy_page(asked)) as c, pytest.raises(ServerError) as caught:
        read.extend(c.read_log_bytes("j1"))
    assert read == []  # the page is no part of the job's log
    assert asked == [0]
    message = str(caught.value)
    assert message.startswith("GET /api/v1/jobs/j1/logs: ")
    assert LOG_OFFSET_HEADER in message and "check that the URL names a danlu server" in message
    assert (caught.value.method, caught.value.path) == ("GET", "/api/v1/jobs/j1/logs")


def test_read_logs_text_stops_too() -> None:
    asked: list[int] = []
    with client(_proxy_page(asked)) as c, pytest.raises(ServerError, match=LOG_OFFSET_HEADER):
        list(c.read_logs("j1", 7))
    assert asked == [7]


@pytest.mark.parametrize("header", ["0", "5"])
def test_an_offset_header_not_past_the_offset_asked_is_a_server_error(header: str) -> None:
    asked: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(int(request.url.params["offset"]))
        assert len(asked) < 50, "the reading did not stop"
        return httpx.Response(200, content=b"hello", headers={LOG_OFFSET_HEADER: header})

    with client(handler) as c, pytest.raises(ServerError) as caught:
        list(c.read_log_bytes("j1", 5))
    assert asked == [5]
    assert f"{LOG_OFFSET_HEADER} of {header}, not past it" in str(caught.value)


def test_a_server_that_pages_its_log_is_still_read_whole() -> None:
    log = bytes(range(256)) * 3

    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        data = log[offset : offset + 100]
        return httpx.Response(200, content=data, headers={LOG_OFFSET_HEADER: str(offset + 100)})

    with client(handler) as c:
        assert b"".join(c.read_log_bytes("j1")) == log
        assert b"".join(c.read_log_bytes("j1", 700)) == log[700:]


def test_an_empty_reply_without_the_header_still_ends_the_log() -> None:
    with client(lambda request: httpx.Response(200, content=b"")) as c:
        assert list(c.read_log_bytes("j1")) == []


def test_a_follow_that_reads_the_rest_from_a_proxy_stops_too() -> None:
    """Once the job has finished, a follow reads what its stream missed with plain reads:
    those stop too."""

    asked: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs"):
            if request.url.params.get("follow"):
                return httpx.Response(200, content=b"")
            asked.append(0)
            return httpx.Response(200, content=PAGE if len(asked) < 50 else b"")
        return httpx.Response(200, json={"id": "j1", "state": "SUCCEEDED"})

    with client(handler) as c, pytest.raises(ServerError, match=LOG_OFFSET_HEADER):
        list(c.follow_log_bytes("j1", reconnect_delay=0))
    assert len(asked) == 1


# -- 2. a read timeout on a log follow -------------------------------------------------------


class _Stalled(httpx.SyncByteStream):
    """A stream that brings ``data`` and then nothing: a read timeout."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        if self.data:
            yield self.data
        raise httpx.ReadTimeout("timed out")


def test_a_follow_stream_is_read_with_a_bounded_read_timeout() -> None:
    timeouts: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("follow"):
            timeouts.append(request.extensions["timeout"]["read"])
            return httpx.Response(200, content=b"")
        if request.url.path.endswith("/logs"):
            return httpx.Response(200, content=b"")
        return httpx.Response(200, json={"id": "j1", "state": "SUCCEEDED"})

    with client(handler) as c:
        assert list(c.follow_log_bytes("j1", reconnect_delay=0)) == []
    with client(handler, follow_read_timeout=2.5) as c:
        assert list(c.follow_log_bytes("j1", reconnect_delay=0)) == []
    assert timeouts[1] == 2.5
    assert isinstance(timeouts[0], float) and 0 < timeouts[0] < math.inf  # was None


def test_a_follow_whose_stream_times_out_opens_again_from_the_last_byte() -> None:
    """Streams that go quiet (read timeouts) are ended and opened again from the last byte
    received: no byte twice, none lost, and no ServerUnavailable however many times it
    happens (``reconnect_for=0``: a lost server would be given up at once)."""
    log = b"first\nsecond\nthird\n"
    follows: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params.get("offset", "0"))
        if request.url.params.get("follow"):
            follows.append(offset)
            cut = [6, 6, 13, 13][len(follows) - 1] if len(follows) <= 4 else len(log)
            return httpx.Response(200, stream=_Stalled(log[offset:cut]))
        if request.url.path.endswith("/logs"):
            return httpx.Response(
                200, content=log[offset:], headers={LOG_OFFSET_HEADER: str(len(log))}
            )
        state = "SUCCEEDED" if len(follows) >= 5 else "RUNNING"
        return httpx.Response(200, json={"id": "j1", "state": state})

    with client(handler, reconnect_for=0) as c:
        assert b"".join(c.follow_log_bytes("j1", reconnect_delay=0)) == log
    assert follows == [0, 6, 6, 13, 13]


@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf, "5", True])
def test_a_follow_read_timeout_no_read_can_keep_is_refused(value: Any) -> None:
    with pytest.raises(SpecError) as caught:
        Client(URL, "tok", follow_read_timeout=value)
    assert caught.value.field == "follow_read_timeout"


class _HalfOpen(BaseHTTPRequestHandler):
    """A log follow whose first stream sends ``abc`` and then nothing, the connection left
    open (a host gone without a word); the next one, from offset 3, sends ``def``. The job
    has finished once a second follow was opened."""

    release: ClassVar[threading.Event] = threading.Event()
    follows: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if "/logs" in self.path and "follow=true" in self.path:
            self.follows.append(self.path)
            first = len(self.follows) == 1
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"abc" if first else b"def")
            self.wfile.flush()
            if first:
                self.release.wait(30)
            return
        if "/logs" in self.path:
            body, headers = b"", {LOG_OFFSET_HEADER: "6"}
        else:
            state = "SUCCEEDED" if len(self.follows) > 1 else "RUNNING"
            body = json.dumps({"id": "j1", "state": state}).encode()
            headers = {"Content-Type": "application/json"}
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_half_open_follow_is_opened_again_over_a_real_socket() -> None:
    read: list[bytes] = []
    _HalfOpen.follows = []
    _HalfOpen.release = threading.Event()
    with serving(_HalfOpen) as port:
        c = Client(f"http://127.0.0.1:{port}", "tok", follow_read_timeout=0.5)

        def follow() -> None:
            with c:
                read.extend(c.follow_log_bytes("j1", reconnect_delay=0))

        worker = threading.Thread(target=follow, daemon=True)
        worker.start()
        worker.join(10)  # a guard against the old hang, not a timing: it takes ~0.5 s
        ended_on_its_own = not worker.is_alive()
        _HalfOpen.release.set()
        worker.join(10)
    assert ended_on_its_own, "the follow hung on the half-open stream"
    assert b"".join(read) == b"abcdef"
    assert [path.split("offset=")[1].split("&")[0] for path in _HalfOpen.follows] == ["0", "3"]
