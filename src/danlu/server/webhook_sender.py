"""The webhook sender: posts the queued deliveries (:mod:`danlu.server.services.webhooks`).

A pass claims due deliveries with a new token in one short transaction (one of each webhook
at most, none of a webhook with one being posted: :func:`webhooks.claim_due`), reads their
messages in another, and posts them with no transaction open, up to ``parallel`` at a time,
each ended ``timeout`` seconds after it began however slowly the endpoint answers
(:class:`_Deadline`). Each outcome is written back as its post ends, only while its token
still holds (in a savepoint: one the store refuses is written as a plain failure; a store
that fails, busy or away, is tried again a pass's wait later), with the backoff counted from
that end; then the freed thread is given the next due delivery of any
webhook. So an endpoint that never answers holds one thread, and delays its own deliveries
only. Every control plane sharing a store runs a sender; the row locks keep two from posting
the same delivery, or to the same webhook, at the same time (a sender that dies mid-post
leaves its rows to be claimed again once another sender has found their claim unchanged
for the lock's ``ttl``, so an endpoint may see a delivery twice: ``X-Danlu-Delivery`` tells
them apart).

The locks' expiries are wall-clock times (:mod:`danlu.server.services.locks`), and no sender
goes by them for another's claims: it takes one over only once its own steady clock found the
claim unchanged for the lock's ``ttl`` (:class:`~danlu.server.services.webhooks.ClaimWatch`),
so a step of either host's clock neither posts a delivery twice nor holds a dead sender's
claims back. A pass never claims a delivery it is posting, or has posted and not yet written
the outcome of, again: a step of the clock ahead past its lock's expiry made it claimable,
and it was posted a second time beside the first. The pending
retries move with a step of the clock (the reconcile loop finds it:
:func:`webhooks.shift_retries`).

Posts go through the proxies :func:`danlu.config.outbound_proxies` reads (``HTTP_PROXY``,
else ``HTTPS_PROXY``, for an http:// URL; ``HTTPS_PROXY`` for an https:// one; ``ALL_PROXY``
when neither is set), straight to a host ``NO_PROXY`` names.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy.orm import Session

from danlu.config import OutboundProxies, outbound_proxies
from danlu.server.db import Database, WebhookDelivery
from danlu.server.loops import PeriodicLoop, clock_due
from danlu.server.services import locks, webhooks

log = logging.getLogger(__name__)

PURGE_EVERY_SECONDS = 600.0
READ_AT_MOST = 4096
"""Bytes read of an error answer's body (its first :data:`EXCERPT` characters are kept); none
of a 2xx answer's: an endpoint's body, however large, is never held."""
EXCERPT = 200
WRITE_TRIES = 5
"""Tries to write one post's outcome when the store fails, a pass's ``interval`` apart
(within the delivery's lock: 5 x 2 s by default, the lock 50 s)."""
Clock = Callable[[], float]


@dataclass(frozen=True)
class _Ended:
    """One post's outcome, for the pass that claimed it with ``token``: ``ended`` is when
    the post ended (its backoff counts from then)."""

    delivery_id: int
    token: str
    status: int | None
    error: str | None
    ended: float


class WebhookSender:
    """Posts due deliveries in a daemon thread (:meth:`start`): a pass every ``interval``
    seconds, or at :meth:`wake`; or one pass at a time (:meth:`run_once`, for tests).

    ``parallel``: posts at most at a time, one a webhook (so that many endpoints may hang
    before a healthy one waits). ``transport``: an httpx transport to post every message
    through (a :class:`httpx.MockTransport` in unit tests; no proxy then); the network by
    default, through ``proxies`` (:func:`danlu.config.outbound_proxies` when None). ``clock``:
    the time, read when a pass starts and when each post ends."""

    def __init__(
        self,
        db: Database,
        *,
        interval: float = 2.0,
        timeout: float = 10.0,
        parallel: int = 16,
        transport: httpx.BaseTransport | None = None,
        proxies: OutboundProxies | None = None,
        clock: Clock = time.time,
    ) -> None:
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1, not {parallel}")
        self.db = db
        self.interval = interval
        self.timeout = timeout
        self.parallel = parallel
        self.ttl = 2 * timeout + 30.0
        """A claimed delivery is posted at once and ends within ``timeout``: its lock
        outlives the post, with room for the store's writes, before another sender may
        claim it."""
        self._clock = clock
        if transport is not None:
            proxies = OutboundProxies()  # every post through the transport given
        self._proxies = outbound_proxies() if proxies is None else proxies
        self._transport = transport
        self._direct, self._via, self._pool = self._open()
        self._closed = False
        """:meth:`stop` closed the pool and the clients (:meth:`start` opens new ones)."""
        self._close_after_pass = False
        """:meth:`stop` returned with a pass still posting: that pass closes them as it
        ends (:meth:`_pass_ended`)."""
        self._state_lock = threading.Lock()
        """Guards :attr:`_ended` and the two flags above."""
        self._purged_at = float("-inf")
        self._stopping = threading.Event()
        self._ended: queue.SimpleQueue[_Ended | None] | None = None
        """The running pass's outcomes (None: a nudge from :meth:`wake`)."""
        self._loop = PeriodicLoop(
            "danlu-webhooks",
            interval,
            self.run_once,
            log,
            "webhook pass",
            "webhook passes work again",
        )

    def _open(self) -> tuple[httpx.Client, dict[str, httpx.Client], ThreadPoolExecutor]:
        """New clients (direct, and one per proxy) and a new pool of posting threads."""
        # no connection is kept: each post opens its own, for its deadline to shut down
        limits = httpx.Limits(max_keepalive_connections=0)
        direct = self._client(self._transport or httpx.HTTPTransport(limits=limits))
        via = {
            proxy: self._client(httpx.HTTPTransport(limits=limits, proxy=proxy))
            for proxy in {self._proxies.http, self._proxies.https}
            if proxy is not None
        }
        pool = ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="danlu-hook")
        return direct, via, pool

    def _close(self) -> None:
        """Close the pool and the clients (under :attr:`_state_lock`; no post under way)."""
        self._closed, self._close_after_pass = True, False
        self._pool.shutdown(wait=False)
        for client in (self._direct, *self._via.values()):
            client.close()

    def _client(self, transport: httpx.BaseTransport) -> httpx.Client:
        # trust_env=False: the proxies are :attr:`_proxies`, read by danlu.config, not
        # httpx's own reading of the environment (which took HTTPS_PROXY for https:// only)
        return httpx.Client(
            timeout=self.timeout, follow_redirects=False, transport=transport, trust_env=False
        )

    def start(self) -> None:
        """Run passes in a daemon thread until :meth:`stop` (again after one: with new
        clients and posting threads, a stopped sender's being closed)."""
        with self._state_lock:
            self._close_after_pass = False  # a stopped pass still posting keeps them
            self._reopen()
            self._stopping.clear()
        self._loop.start()

    def _reopen(self) -> None:
        """New clients and posting threads if :meth:`stop` closed them (under
        :attr:`_state_lock`)."""
        if self._closed:
            self._direct, self._via, self._pool = self._open()
            self._closed = False

    def wake(self) -> None:
        """Look for due deliveries now (in the running pass, or the next one)."""
        self._loop.wake()
        self._nudge()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread once the posts under way have ended (within the sender's
        ``timeout``) and their outcomes are written, waiting for that up to ``timeout``
        seconds (None: the sender's ``timeout`` plus the outcomes' :data:`WRITE_TRIES`
        tries, and 10 s more); close the clients and the posting threads. A pass still
        posting then is not cut off: it finishes its posts and writes their outcomes in its
        own thread, and closes them as it ends (said in the log; a process that exits
        meanwhile leaves those deliveries to be posted again once their locks expire). Posts
        were cut off before: the connections closed under them, a delivered post was
        written as failed and posted again."""
        if timeout is None:
            timeout = self.timeout + WRITE_TRIES * self.interval + 10.0
        with self._state_lock:
            self._stopping.set()
        self._nudge()
        self._loop.stop(timeout)
        with self._state_lock:
            if self._closed:
                return
            if self._ended is None:  # no pass under way
                self._close()
                return
            self._close_after_pass = True
        log.warning(
            "webhooks: a pass still posts %g s after the stop; it finishes its posts and "
            "writes their outcomes before it ends",
            timeout,
        )

    def _pass_ended(self) -> None:
        """A pass ends: close what :meth:`stop` left to it."""
        with self._state_lock:
            self._ended = None
            if self._close_after_pass and self._stopping.is_set():
                self._close()

    def _nudge(self) -> None:
        ended = self._ended
        if ended is not None:
            ended.put(None)

    def run_once(self, now: float | None = None) -> int:
        """One pass: post every due delivery and write its outcome; returns how many were
        posted. A pass ends when nothing is due or being posted: while posts are under way,
        each outcome is written as it comes, and due deliveries are claimed for the threads
        that are free, at once after an outcome or a :meth:`wake`, else every ``interval``
        seconds. An outcome the store fails to take (busy, away) is written again an
        ``interval`` later (:meth:`_try_write`), and a claim that fails while posts are under
        way waits for their outcomes: a pass never ends with an outcome in hand unwritten.
        ``now``: the time of the whole pass, every post's end included (tests); else the
        sender's clock."""
        clock: Clock = self._clock if now is None else (lambda: now)
        ended: queue.SimpleQueue[_Ended | None] = queue.SimpleQueue()
        with self._state_lock:
            self._reopen()  # a pass after a stop (tests): closed again by the next stop
            self._ended = ended
        try:
            return self._pass(clock, ended)
        finally:
            self._pass_ended()

    def _pass(self, clock: Clock, ended: queue.SimpleQueue[_Ended | None]) -> int:
        """The body of :meth:`run_once`, its outcomes coming in ``ended``."""
        self._purge(clock())
        posting = posted = 0
        unwritten: list[tuple[_Ended, int]] = []  # outcomes the store refused, and tries
        retry_at = 0.0  # time.monotonic() when they are tried again
        mine: set[int] = set()  # claimed by this pass, their outcomes not yet written
        while True:
            if posting < self.parallel and not self._stopping.is_set():
                try:
                    room = self.parallel - posting
                    started = self._post_due(clock(), room, ended, clock, mine)
                except Exception as exc:
                    if not posting and not unwritten:
                        raise  # nothing under way: the loop logs it
                    # posts under way: their outcomes are still written as they come
                    log.warning("webhooks: cannot claim deliveries now: %s", exc)
                    started = 0
                posting += started
                posted += started
            if not posting and not unwritten:
                return posted
            outcomes = _waiting(ended, self.interval)
            posting -= len(outcomes)
            retry: list[tuple[_Ended, int]] = []  # a wait after a failed try, not a wake
            if unwritten and time.monotonic() >= retry_at:
                retry, unwritten = unwritten, []
            for outcome, tries in [*retry, *((o, 0) for o in outcomes)]:
                if self._try_write(outcome, tries + 1):
                    mine.discard(outcome.delivery_id)
                else:
                    unwritten.append((outcome, tries + 1))
                    retry_at = time.monotonic() + self.interval

    def _purge(self, t: float) -> None:
        if not clock_due(self._purged_at + PURGE_EVERY_SECONDS, t, PURGE_EVERY_SECONDS):
            return
        with self.db.session() as session:
            purged = webhooks.purge(session, t)  # a write every 10 minutes at most
        if purged:
            log.info("webhooks: deleted %d deliveries done long ago", purged)
        self._purged_at = t

    def _post_due(
        self,
        t: float,
        room: int,
        ended: queue.SimpleQueue[_Ended | None],
        clock: Clock,
        mine: set[int],
    ) -> int:
        """Claim up to ``room`` due deliveries with a new token and start posting them in
        the pool, each to put its outcome in ``ended``; returns how many were started, added
        to ``mine``: the deliveries this pass posts (or has posted) whose outcomes are not
        written yet, never claimed again meanwhile (:func:`webhooks.claim_due`), whatever
        the clock says of their locks. What fails after the claim (the store failing to
        read their messages) gives the claims of those not started back before it is
        raised: they were left locked, unposted, until their lock expired."""
        with self.db.read_session() as session:  # most passes: nothing due, nothing written
            if not webhooks.any_due(session, t, self.ttl, mine):
                return 0
        token = secrets.token_hex(16)
        with self.db.session() as session:
            claimed = webhooks.claim_due(session, token, self.ttl, t, room, posting=mine)
        if not claimed:
            return 0
        started: set[int] = set()
        try:
            with self.db.read_session() as session:
                messages = webhooks.outgoing(session, claimed, t)  # none of a hook removed
            for message in messages:
                self._pool.submit(self._post_to_queue, message, token, ended, clock)
                started.add(message.delivery_id)
                mine.add(message.delivery_id)
        except BaseException:
            self._unclaim([d for d in claimed if d not in started], token)
            raise
        return len(messages)

    def _unclaim(self, delivery_ids: list[int], token: str) -> None:
        """Give back the claims (``token``) of deliveries that were not posted, if the store
        takes it (else they are claimed again once their lock expires)."""
        if not delivery_ids:
            return
        try:
            with self.db.session() as session:
                locks.release_if_token(session, WebhookDelivery, delivery_ids, token)
        except Exception as exc:
            log.warning("webhooks: cannot give back %d claims: %s", len(delivery_ids), exc)

    def _post_to_queue(
        self,
        message: webhooks.Outgoing,
        token: str,
        ended: queue.SimpleQueue[_Ended | None],
        clock: Clock,
    ) -> None:
        """Post ``message`` (in a pool thread) and put its outcome in ``ended``, whatever
        happens: the pass waits for one outcome per post."""
        try:
            status, error = self._post(message)
        except Exception as exc:  # a bug: still an attempt, never a pass waiting forever
            log.exception("webhooks: delivery %d: the post failed", message.delivery_id)
            status, error = None, f"{type(exc).__name__}: {exc}"
        ended.put(_Ended(message.delivery_id, token, status, error, clock()))

    def _try_write(self, outcome: _Ended, tries: int) -> bool:
        """:meth:`_write` ``outcome``; False when the store failed (busy, away) and it is to
        be tried again, a pass's wait later, until :data:`WRITE_TRIES` tries have failed
        (its delivery stays locked meanwhile: an outcome dropped at the first failure left
        its delivery to be posted again, a delivered one twice, once its lock expired)."""
        try:
            self._write(outcome)
        except Exception as exc:
            if tries < WRITE_TRIES:
                log.warning(
                    "webhooks: delivery %d: its outcome could not be written (%s); trying again",
                    outcome.delivery_id,
                    exc,
                )
                return False
            log.error(
                "webhooks: delivery %d: its outcome could not be written in %d tries (%s); "
                "it is posted again once its lock expires",
                outcome.delivery_id,
                tries,
                exc,
            )
        return True

    def _write(self, outcome: _Ended) -> None:
        """Write one outcome in its own transaction (no network I/O in it)."""
        with self.db.session() as session:
            written = self._record(session, outcome)
        if not written:
            log.warning(
                "webhooks: delivery %d: its outcome was dropped (lock lost or webhook removed)",
                outcome.delivery_id,
            )

    def _record(self, session: Session, outcome: _Ended) -> bool:
        """Write one outcome (:func:`webhooks.record`, as of when its post ended) in a
        savepoint; one the store refuses is written again as a plain failure, so the
        attempt still counts (an uncounted one is posted again, and again, once its lock
        expires)."""
        try:
            with session.begin_nested():
                return webhooks.record(
                    session,
                    outcome.delivery_id,
                    outcome.token,
                    outcome.ended,
                    status_code=outcome.status,
                    error=outcome.error,
                )
        except Exception as exc:
            log.warning(
                "webhooks: delivery %d: its outcome was refused: %s", outcome.delivery_id, exc
            )
            refused = type(exc).__name__
        try:
            with session.begin_nested():
                return webhooks.record(
                    session,
                    outcome.delivery_id,
                    outcome.token,
                    outcome.ended,
                    status_code=outcome.status,
                    error=f"the outcome could not be stored ({refused})",
                )
        except Exception:
            log.exception("webhooks: delivery %d: no outcome could be stored", outcome.delivery_id)
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

    def _client_for(self, url: httpx.URL) -> httpx.Client:
        """The client to post to ``url`` with: through the proxy of its scheme, unless
        ``NO_PROXY`` names its host (:func:`_bypasses`)."""
        proxy = {"http": self._proxies.http, "https": self._proxies.https}.get(url.scheme)
        if proxy is None or _bypasses(url, self._proxies.no_proxy):
            return self._direct
        return self._via[proxy]

    def _exchange(
        self, message: webhooks.Outgoing, deadline: _Deadline
    ) -> tuple[int | None, str | None]:
        headers = {**message.headers, "Accept-Encoding": "identity"}  # an excerpt to read
        url = httpx.URL(message.url)
        with self._client_for(url).stream(
            "POST",
            url,
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


def _waiting(ended: queue.SimpleQueue[_Ended | None], seconds: float) -> list[_Ended]:
    """The outcomes in ``ended`` once one comes, or a nudge, or ``seconds`` pass (then
    perhaps none)."""
    got: list[_Ended | None] = []
    with contextlib.suppress(queue.Empty):
        got.append(ended.get(timeout=seconds))
        while True:
            got.append(ended.get_nowait())
    return [outcome for outcome in got if outcome is not None]


def _bypasses(url: httpx.URL, no_proxy: tuple[str, ...]) -> bool:
    """Whether an entry of ``NO_PROXY`` names ``url``'s host: ``*`` (every host), the host
    itself or a domain it is in (``example.com`` and ``.example.com`` both take
    ``hooks.example.com``), an IP address or network (``10.0.0.0/8``); an entry with a
    ``:PORT`` only for that port."""
    host = url.host.lower().rstrip(".")
    port = url.port or (443 if url.scheme == "https" else 80)
    for entry in no_proxy:
        name, wanted = _split_port(entry.strip().lower())
        if name == "*":
            return True
        if wanted is not None and wanted != port:
            continue
        try:
            network = ipaddress.ip_network(name, strict=False)
        except ValueError:
            domain = name.lstrip("*").strip(".")
            if domain and (host == domain or host.endswith("." + domain)):
                return True
            continue
        try:
            if ipaddress.ip_address(host) in network:
                return True
        except ValueError:
            continue  # a host name is never in an IP network
    return False


def _split_port(entry: str) -> tuple[str, int | None]:
    """``host:port``, ``[v6]:port``, ``[v6]``, ``v6`` or ``host``: the host and the port."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest.removeprefix(":")
        return host, int(port) if port.isdigit() else None
    host, colon, port = entry.rpartition(":")
    if colon and port.isdigit() and ":" not in host:
        return host, int(port)
    return entry, None


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
