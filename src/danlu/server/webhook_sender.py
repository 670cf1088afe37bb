"""The webhook sender: posts the queued deliveries (:mod:`danlu.server.services.webhooks`).

Each pass claims due deliveries with its token in one short transaction, reads their messages
in another, posts them with no transaction open (a few at a time, each ended ``timeout``
seconds after it began, however slowly the endpoint answers: :class:`_Deadline`), then writes
every outcome back only while its token still holds (each in its own savepoint: one the store
refuses is written as a plain failure, never undoing the others). Every control plane sharing
a store runs a sender; the row locks keep two from posting the same delivery at the same
time (a sender that dies mid-post leaves its rows to be claimed again once their lock
expires, so an endpoint may see a delivery twice: ``X-Danlu-Delivery`` tells them apart).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from sqlalchemy.orm import Session

from danlu.server.db import Database
from danlu.server.loops import PeriodicLoop
from danlu.server.services import webhooks
from danlu.server.services.common import resolve_now

log = logging.getLogger(__name__)

PURGE_EVERY_SECONDS = 600.0
READ_AT_MOST = 4096
"""Bytes read of an error answer's body (its first :data:`EXCERPT` characters are kept); none
of a 2xx answer's: an endpoint's body, however large, is never held."""
EXCERPT = 200


class WebhookSender:
    """Posts due deliveries every ``interval`` seconds in a daemon thread (:meth:`start`), or
    one pass at a time (:meth:`run_once`, for tests). ``transport``: an httpx transport to
    post through (a :class:`httpx.MockTransport` in unit tests); the network by default."""

    def __init__(
        self,
        db: Database,
        *,
        interval: float = 2.0,
        timeout: float = 10.0,
        batch: int = 16,
        parallel: int = 4,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.db = db
        self.interval = interval
        self.timeout = timeout
        self.batch = batch
        self.token = secrets.token_hex(16)
        self.ttl = timeout * (batch // parallel + 2) + 30.0
        """Long enough for a whole batch to time out before another sender may claim it."""
        # the control plane's HTTPS_PROXY / NO_PROXY apply, as to any HTTP client; no
        # connection is kept: each post opens its own, for its deadline to shut down
        self._client = httpx.Client(
            timeout=timeout,
            follow_redirects=False,
            transport=transport,
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        self._pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="danlu-hook")
        self._purged_at = float("-inf")
        self._loop = PeriodicLoop(
            "danlu-webhooks",
            interval,
            self._drain,
            log,
            "webhook pass",
            "webhook passes work again",
        )

    def start(self) -> None:
        """Run passes in a daemon thread until :meth:`stop`."""
        self._loop.start()

    def wake(self) -> None:
        """Run the next pass now."""
        self._loop.wake()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the thread after its current pass and close the connections."""
        self._loop.stop(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def _drain(self) -> None:
        """Passes until one finds less than a full batch due (the backlog is sent at once)."""
        while self.run_once() >= self.batch:
            pass

    def run_once(self, now: float | None = None) -> int:
        """One pass: post the due deliveries (up to ``batch``); returns how many were tried."""
        t = resolve_now(now)
        if t - self._purged_at >= PURGE_EVERY_SECONDS:
            with self.db.session() as session:
                purged = webhooks.purge(session, t)  # a write every 10 minutes at most
            if purged:
                log.info("webhooks: deleted %d deliveries done long ago", purged)
            self._purged_at = t
        with self.db.read_session() as session:  # most passes: nothing due, nothing written
            if not webhooks.any_due(session, t):
                return 0
        with self.db.session() as session:
            claimed = webhooks.claim_due(session, self.token, self.ttl, t, self.batch)
        if not claimed:
            return 0
        with self.db.read_session() as session:
            messages = webhooks.outgoing(session, claimed, t)
        outcomes = list(self._pool.map(self._post, messages))  # no transaction open
        lost = 0
        with self.db.session() as session:
            for message, (status, error) in zip(messages, outcomes, strict=True):
                if not self._record(session, message.delivery_id, t, status, error):
                    lost += 1
        if lost:
            log.warning("webhooks: %d outcomes dropped (lock lost or webhook removed)", lost)
        return len(messages)

    def _record(
        self, session: Session, delivery_id: int, t: float, status: int | None, error: str | None
    ) -> bool:
        """Write one outcome (:func:`webhooks.record`) in its own savepoint; one the store
        refuses is written again as a plain failure, so the attempt still counts (an
        uncounted one is posted again, and again, once its lock expires) and the batch's
        other outcomes stand."""
        try:
            with session.begin_nested():
                return webhooks.record(
                    session, delivery_id, self.token, t, status_code=status, error=error
                )
        except Exception as exc:
            log.warning("webhooks: delivery %d: its outcome was refused: %s", delivery_id, exc)
            refused = type(exc).__name__
        try:
            with session.begin_nested():
                return webhooks.record(
                    session,
                    delivery_id,
                    self.token,
                    t,
                    status_code=status,
                    error=f"the outcome could not be stored ({refused})",
                )
        except Exception:
            log.exception("webhooks: delivery %d: no outcome could be stored", delivery_id)
            return False

    def _post(self, message: webhooks.Outgoing) -> tuple[int | None, str | None]:
        """POST one message: its HTTP status and, for anything but a 2xx, what went wrong.
        Only the status is waited for, and the start of an error's body; all of it within
        ``timeout`` seconds of the start (connecting, sending and reading together)."""
        deadline = _Deadline(self.timeout)
        try:
            return self._exchange(message, deadline)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError, OSError) as exc:
            # every way a post can fail counts as an attempt: nothing escapes to leave the
            # row locked and tried again, uncounted, once its lock expires
            if deadline.passed():
                return None, f"Timeout: no complete answer within {self.timeout:g} s"
            return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        finally:
            deadline.close()

    def _exchange(
        self, message: webhooks.Outgoing, deadline: _Deadline
    ) -> tuple[int | None, str | None]:
        headers = {**message.headers, "Accept-Encoding": "identity"}  # an excerpt to read
        with self._client.stream(
            "POST",
            message.url,
            content=message.body,
            headers=headers,
            extensions={"trace": deadline.trace},
        ) as response:
            status = response.status_code
            if 200 <= status < 300:
                return status, None  # its body is not read: it is closed unread
            start = _start_of(response, deadline)
            encoding = response.charset_encoding or "utf-8"
        try:
            text = start.decode(encoding, "replace")
        except LookupError:  # a charset Python does not know
            text = start.decode("utf-8", "replace")
        excerpt = text[:EXCERPT].strip()
        return status, f"HTTP {status}" + (f": {excerpt}" if excerpt else "")


def _start_of(response: httpx.Response, deadline: _Deadline) -> bytes:
    """The first :data:`READ_AT_MOST` bytes of ``response``'s body at most, or what came of
    it before the deadline or the connection's end."""
    got = bytearray()
    try:
        for chunk in response.iter_raw():
            got += chunk
            if len(got) >= READ_AT_MOST or deadline.passed():
                break
    except (httpx.HTTPError, ValueError, OSError):
        pass  # cut off: the start that came will do
    return bytes(got[:READ_AT_MOST])


class _Deadline:
    """Ends one post ``seconds`` after it began, whatever the endpoint does. httpx's timeout
    bounds each read and write only: an endpoint answering a byte at a time held a post,
    and so the sender's pass, as long as it liked. The post's connection is caught as it
    opens (httpcore's documented ``trace`` extension: the stream ``connect_tcp`` returned)
    and shut down when the time is up, which ends a read or write blocked on it at once,
    TLS or not. A duplicate of its socket is kept, so the descriptor shut down is always
    this connection's, never one a later connection reuses."""

    def __init__(self, seconds: float) -> None:
        self.ends = time.monotonic() + seconds
        self._expired = False
        self._closed = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def passed(self) -> bool:
        """Whether the time is up."""
        return self._expired or time.monotonic() >= self.ends

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """The ``trace`` callback: keeps each connection the post opens (a proxy's too)."""
        if not event.endswith((".connect_tcp.complete", ".connect_unix_socket.complete")):
            return
        try:
            sock = info["return_value"].get_extra_info("socket").dup()
        except (AttributeError, KeyError, OSError):
            return  # not a socket: the per-read timeout still bounds it
        with self._lock:
            if self._closed:
                sock.close()
                return
            self._socks.append(sock)
            if self._expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._expired = True
            for sock in self._socks:
                _shut(sock)

    def close(self) -> None:
        """The post is over: stop the timer, let the connection go."""
        self._timer.cancel()
        with self._lock:
            self._closed = True
            socks, self._socks = self._socks, []
        for sock in socks:
            sock.close()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # closed already
        sock.shutdown(socket.SHUT_RDWR)
