"""A server that closes the connection after a request was sent, without answering: for a
request that changes something (a submission), the error said "cannot reach the server, is it
running?", and a user sending it again could submit the job twice. It says now that the
request may have been carried out, as a timeout does; a read says to try again as before."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest
from local_http import serving

from danlu.client import Client, ServerUnavailable


class _Hangs(BaseHTTPRequestHandler):
    """Reads each request whole, then closes the connection without an answer."""

    seen: ClassVar[list[str]] = []

    def _drop(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).seen.append(f"{self.command} {self.path}")
        self.close_connection = True

    do_GET = do_POST = _drop

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    _Hangs.seen = []
    with serving(_Hangs) as port:
        yield f"http://127.0.0.1:{port}"


def test_a_submission_whose_answer_was_lost_may_have_been_carried_out(url: str) -> None:
    with Client(url, "tok") as client, pytest.raises(ServerUnavailable) as caught:
        client.request("POST", "/jobs", json={"name": "x"})
    message = str(caught.value)
    assert _Hangs.seen == ["POST /api/v1/jobs"]  # sent once, not again
    assert "closed the connection before answering POST /api/v1/jobs" in message
    assert "may still have been carried out: check before sending it again" in message
    assert "is it running" not in message


def test_a_read_whose_answer_was_lost_says_the_server_cannot_be_reached(url: str) -> None:
    with Client(url, "tok", reconnect_for=0.0) as client, pytest.raises(ServerUnavailable) as c:
        client.request("GET", "/health")
    assert "cannot reach the danlu server" in str(c.value)
    assert "carried out" not in str(c.value)
