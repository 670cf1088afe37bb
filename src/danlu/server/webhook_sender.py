"""The webhook sender: posts the queued deliveries (:mod:`danlu.server.services.webhooks`).

Each pass claims due deliveries with its token in one short transaction, reads their messages
in another, posts them with no transaction open (a few at a time, each within ``timeout``),
then writes every outcome back only while its token still holds. Every control plane sharing
a store runs a sender; the row locks keep two from posting the same delivery at the same
time (a sender that dies mid-post leaves its rows to be claimed again once their lock
expires, so an endpoint may see a delivery twice: ``X-Danlu-Delivery`` tells them apart).
"""

from __future__ import annotations

import logging
import secrets
from concurrent.futures import ThreadPoolExecutor

import httpx

from danlu.server.db import Database
from danlu.server.loops import PeriodicLoop
from danlu.server.services import webhooks
from danlu.server.services.common import resolve_now

log = logging.getLogger(__name__)

PURGE_EVERY_SECONDS = 600.0


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
        # the control plane's HTTPS_PROXY / NO_PROXY apply, as to any HTTP client
        self._client = httpx.Client(timeout=timeout, follow_redirects=False, transport=transport)
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
                if not webhooks.record(
                    session, message.delivery_id, self.token, t, status_code=status, error=error
                ):
                    lost += 1
        if lost:
            log.warning("webhooks: %d outcomes dropped (lock lost or webhook removed)", lost)
        return len(messages)

    def _post(self, message: webhooks.Outgoing) -> tuple[int | None, str | None]:
        """POST one message: its HTTP status and, for anything but a 2xx, what went wrong."""
        try:
            response = self._client.post(message.url, content=message.body, headers=message.headers)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError, OSError) as exc:
            # every way a post can fail counts as an attempt: nothing escapes to leave the
            # row locked and tried again, uncounted, once its lock expires
            return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if 200 <= response.status_code < 300:
            return response.status_code, None
        excerpt = response.text[:200].strip()
        return response.status_code, f"HTTP {response.status_code}" + (
            f": {excerpt}" if excerpt else ""
        )
