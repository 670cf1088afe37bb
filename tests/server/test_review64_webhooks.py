"""The webhook sender against hostile endpoints: an error body the store cannot take as it
is (a NUL byte: PostgreSQL's text refuses it), an endpoint that trickles its answer (the
timeout is a deadline on the whole post), one that answers with a huge body (read no more
than the status and the start of an error's body), and an outcome that cannot be written
(the rest of the batch is written all the same)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from danlu.server.db import Database
from danlu.server.services import webhooks
from danlu.server.webhook_sender import WebhookSender

NOW = 1_000_000.0


class ErrorBody:
    """An HTTP endpoint answering 500 with ``body``."""

    def __init__(self, body: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(500)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/x"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RawEndpoint:
    """A socket endpoint that reads one request, then runs ``answer(conn)``; ``sent`` counts
    the bytes it managed to send before the sender hung up."""

    def __init__(self, answer: Callable[[socket.socket, RawEndpoint], None]) -> None:
        self.sent = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(4)
        self._listener.settimeout(10.0)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/x"
        self._answer = answer
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10.0)
            try:
                conn.recv(65536)
                self._answer(conn, self)
            except OSError:
                pass  # the sender hung up: what it should do

    def send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def close(self) -> None:
        self._thread.join(15.0)
        self._listener.close()


def _one_ping(db: Database, url: str) -> str:
    with db.session() as s:
        hook = webhooks.create(s, url, "admin", now=NOW)
        webhooks.ping(s, hook.id, now=NOW)
        return hook.id


def _the_delivery(db: Database, hook_id: str) -> webhooks.WebhookDelivery:
    with db.read_session() as s:
        [delivery] = webhooks.deliveries(s, hook_id)
        s.expunge(delivery)
        return delivery


def test_an_error_body_with_nul_and_control_characters_is_stored_readably(db: Database) -> None:
    """On PostgreSQL the NUL failed the outcome's write: the pass raised, the attempt was
    never counted and the delivery was posted again, forever."""
    endpoint = ErrorBody(b"error\x00detail\x1b[31m red\r\nnext\tline")
    sender = WebhookSender(db, timeout=5.0)
    try:
        hook_id = _one_ping(db, endpoint.url)
        assert sender.run_once(now=NOW) == 1
    finally:
        sender.stop()
        endpoint.close()
    tried = _the_delivery(db, hook_id)
    assert (tried.attempts, tried.status_code, tried.lock_token) == (1, 500, None)
    assert tried.next_attempt_at == NOW + webhooks.FIRST_BACKOFF_SECONDS
    assert tried.last_error == "HTTP 500: error\ufffddetail\ufffd[31m red  next line"


def test_stored_error_text_keeps_no_control_characters(db: Database) -> None:
    """Whatever error a caller hands :func:`webhooks.record` (an exception's text too)."""
    hook_id = _one_ping(db, "http://127.0.0.1:9/x")
    with db.session() as s:
        [claimed] = webhooks.claim_due(s, "me", 60.0, NOW, 10)
        error = "ConnectError: \x00\x07bad\ud800" + "x" * 2000
        assert webhooks.record(s, claimed, "me", NOW, status_code=None, error=error)
    stored = _the_delivery(db, hook_id).last_error or ""
    assert stored.startswith("ConnectError: \ufffd\ufffdbad\ufffdxxx") and len(stored) == 1000


def test_an_outcome_that_cannot_be_written_leaves_the_rest_of_the_batch_written(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = ErrorBody(b"nope")
    first = _one_ping(db, endpoint.url)
    second = _one_ping(db, endpoint.url)
    with db.read_session() as s:
        [bad] = [d.id for d in webhooks.deliveries(s, first)]
    real = webhooks.record

    def failing(session: Any, delivery_id: int, *args: Any, **kwargs: Any) -> bool:
        if delivery_id == bad and kwargs["error"].startswith("HTTP"):
            raise ValueError("the store refused it")
        return real(session, delivery_id, *args, **kwargs)

    monkeypatch.setattr(webhooks, "record", failing)
    sender = WebhookSender(db, timeout=5.0)
    try:
        assert sender.run_once(now=NOW) == 2
    finally:
        sender.stop()
        endpoint.close()
    other = _the_delivery(db, second)
    assert (other.attempts, other.last_error, other.lock_token) == (1, "HTTP 500: nope", None)
    refused = _the_delivery(db, first)  # still counted, with what could be written
    assert (refused.attempts, refused.status_code, refused.lock_token) == (1, 500, None)
    assert "could not be stored" in (refused.last_error or ""), refused.last_error


def _trickle(head: bytes, body: bytes, pause: float = 0.1) -> Callable[..., None]:
    """Send ``head`` at once, then ``body`` a byte every ``pause`` seconds."""

    def answer(conn: socket.socket, endpoint: RawEndpoint) -> None:
        endpoint.send(conn, head)
        for byte in body:
            time.sleep(pause)
            endpoint.send(conn, bytes([byte]))

    return answer


STATUS_LINE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Padding: " + b"x" * 30 + b"\r\n\r\n"


@pytest.mark.parametrize(
    ("head", "body", "status", "error"),
    [
        # the answer's head a byte at a time: never a whole answer within the deadline
        (b"", STATUS_LINE, None, "Timeout: no complete answer within 0.5 s"),
        # a 2xx delivers at once: its body is never waited for
        (b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n", b"y" * 40, 200, None),
        # an error's body is read until the deadline only
        (b"HTTP/1.1 503 Busy\r\nContent-Length: 40\r\n\r\n", b"z" * 40, 503, "HTTP 503: zz"),
    ],
    ids=["head", "2xx-body", "error-body"],
)
def test_the_timeout_is_a_deadline_on_the_whole_post(
    sqlite_db: Database, head: bytes, body: bytes, status: int | None, error: str | None
) -> None:
    """Each byte comes well within the timeout (httpx's is per read), the whole answer takes
    4 s: the post gives up after 0.5 s, a failed attempt unless a 2xx came."""
    endpoint = RawEndpoint(_trickle(head, body))
    sender = WebhookSender(sqlite_db, timeout=0.5)
    try:
        hook_id = _one_ping(sqlite_db, endpoint.url)
        started = time.monotonic()
        assert sender.run_once(now=NOW) == 1
        took = time.monotonic() - started
    finally:
        sender.stop()
        endpoint.close()
    assert took < 2.0, took
    tried = _the_delivery(sqlite_db, hook_id)
    assert (tried.attempts, tried.status_code, tried.delivered) == (1, status, error is None)
    if error is None:
        assert tried.last_error is None
    else:
        assert (tried.last_error or "").startswith(error), tried.last_error


def _huge(status: bytes, size: int) -> Callable[..., None]:
    def answer(conn: socket.socket, endpoint: RawEndpoint) -> None:
        endpoint.send(conn, b"HTTP/1.1 " + status + f"\r\nContent-Length: {size}\r\n\r\n".encode())
        chunk = b"e" * 2**20
        for _ in range(size // len(chunk)):
            endpoint.send(conn, chunk)

    return answer


@pytest.mark.parametrize("status", [b"200 OK", b"500 Oops"])
def test_a_huge_answer_is_not_read(sqlite_db: Database, status: bytes) -> None:
    """Only the status and the start of an error's body are needed: the sender hangs up
    (the endpoint cannot send more than the sockets' buffers hold), it never reads 64 MiB."""
    size = 64 * 2**20
    endpoint = RawEndpoint(_huge(status, size))
    sender = WebhookSender(sqlite_db, timeout=5.0)
    try:
        hook_id = _one_ping(sqlite_db, endpoint.url)
        assert sender.run_once(now=NOW) == 1
    finally:
        sender.stop()
        endpoint.close()
    assert endpoint.sent < size // 2, endpoint.sent
    tried = _the_delivery(sqlite_db, hook_id)
    assert tried.attempts == 1
    if status.startswith(b"200"):
        assert (tried.delivered, tried.last_error) == (True, None)
    else:
        assert tried.last_error == "HTTP 500: " + "e" * 200
