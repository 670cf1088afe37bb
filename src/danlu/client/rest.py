"""The :class:`Client` of the danlu REST API (``docs/api.md``), over :class:`httpx.Client`;
it finds a local server with :func:`~danlu.client.discovery.find_server`. Its errors are
those of :mod:`danlu.client.errors`. Here: its requests and their retries, its waits, and
the followers that ride out a restart (a log's follow, :func:`read_across_restart`); the
calls of jobs and sweeps are :class:`~danlu.client.job_calls.JobCalls`', the reads of a
job's events, metrics and log :class:`~danlu.client.job_records.JobRecords`', and the calls
of accounts, projects, the cluster and webhooks
:class:`~danlu.client.account_calls.AccountCalls`'."""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx

from danlu.client.bodies import (
    busy,
    check_offset,
    check_token,
    json_content,
    listed,
    retry_after,
    seg,
)
from danlu.client.discovery import (
    API_PREFIX,
    DEFAULT_HOME,
    find_server,
    loopback_pattern,
    same_server,
    server_base,
    shown_url,
)
from danlu.client.errors import (
    JobDict,
    NoServerError,
    ServerError,
    ServerUnavailable,
    WaitTimeout,
    error_from_response,
    from_proxy,
    no_answer,
    out_of_reach,
)
from danlu.client.job_calls import MAX_PAGE as MAX_PAGE
from danlu.client.job_calls import JobCalls
from danlu.client.job_records import LOG_OFFSET_HEADER as LOG_OFFSET_HEADER
from danlu.client.job_records import METRICS_CURSOR_HEADER as METRICS_CURSOR_HEADER
from danlu.client.job_records import JobRecords, _decoded
from danlu.client.waits import FINISHED_STATES as FINISHED_STATES
from danlu.client.waits import asked_job, check_limits, check_seconds, wait_for
from danlu.core.errors import ConfigError

LOG_TRUNCATED_NOTE = b"[danlu: the log was truncated; following it from its start]\n"
"""The line a follow's stream carries where the job's log was truncated (docs/api.md): the
bytes after it are the log's from its first byte."""
RECONNECT_FOR = 60.0
"""How long (seconds) a follower that has reached the server keeps trying to reach it again
(a control-plane restart) before it gives up: :attr:`Client.reconnect_for`'s default."""
RECONNECT_PAUSE = 1.0
"""The pause (seconds) between a follower's tries to reach a server it has lost."""
MIN_RECONNECT_DELAY = 0.1
"""The shortest pause (seconds) before a log follow whose stream brought nothing is opened
again: a smaller ``reconnect_delay`` (0 too) is taken as this one, as ``danlu wait --poll``
takes nothing below 0.1 s. A server or proxy that ends each stream at once made a delay of 0
a loop of requests as fast as it answered."""
FOLLOW_READ_TIMEOUT = 300.0
"""How long (seconds) a log follow waits for its stream's next bytes before it ends that
stream and opens the follow again from the last byte received (the default of
:attr:`Client.follow_read_timeout`). The server sends nothing while a job is quiet (up to its
follow timeout, an hour), so this is no bound on its silence: reopening then is what the end
of its follow timeout does, one request more each time; without it, a half-open connection
(a peer or NAT gone without a word) blocked a follow for ever."""


class Client(JobCalls, JobRecords):
    """The REST client. ``url`` is the server's base URL (``http://127.0.0.1:8470``, with or
    without ``/api/v1``; with a user name, password, query or fragment a
    :class:`ConfigError`, as are proxy or CA settings httpx cannot use: requests go through
    the environment's ``HTTP_PROXY``, ``HTTPS_PROXY`` or ``ALL_PROXY`` as ``NO_PROXY``
    allows, but never to a server on this machine's loopback (:func:`loopback_pattern`));
    ``token``: the API token, sent without the whitespace around it (a file's line break);
    ``transport`` replaces the network (``httpx.MockTransport``, ``httpx.ASGITransport``
    for in-process tests). Limits no request or wait can keep are a :class:`SpecError`
    (:func:`~danlu.client.waits.check_limits`)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float | None = 30,
        busy_retries: int = 5,
        reconnect_for: float = RECONNECT_FOR,
        follow_read_timeout: float = FOLLOW_READ_TIMEOUT,
    ) -> None:
        check_limits(timeout, busy_retries, reconnect_for, follow_read_timeout)
        self.follow_read_timeout = follow_read_timeout
        """How long a log follow waits for more bytes before it opens the follow again from
        the last byte received (:data:`FOLLOW_READ_TIMEOUT`)."""
        self.busy_retries = busy_retries
        """How many times a request answered 503 "busy" (the server's database was busy and
        changed nothing) is sent again, after the server's ``Retry-After`` (at most 5 s)."""
        self.reconnect_for = reconnect_for
        """How long (seconds) a follower (:meth:`follow_log_bytes`, :meth:`wait`) that has
        reached the server keeps trying again once it cannot (a control-plane restart)
        before it raises :class:`ServerUnavailable`."""
        self._answered = False
        """Whether the server has answered this client once (then losing it is a restart)."""
        if isinstance(token, str):  # a token read from a file, with its line break (\r\n)
            token = token.strip() or token  # as the CLI and the home's admin.token read it
        self.token = token
        headers = {"Accept": "application/json"}
        if token:
            check_token(token)
            headers["Authorization"] = f"Bearer {token}"
        self.url = base = server_base(url)
        try:  # httpx reads the proxy and CA settings of the environment here
            local = loopback_pattern(base)  # never through the environment's proxy
            self._http = httpx.Client(
                base_url=base + API_PREFIX,
                headers=headers,
                transport=transport,
                timeout=timeout,
                mounts={local: None} if local and transport is None else None,
            )
        except (httpx.InvalidURL, ValueError, OSError, ImportError) as exc:
            raise ConfigError(
                f"cannot reach servers with this environment's proxy or CA settings ({exc}): "
                "check HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY, SSL_CERT_FILE, SSL_CERT_DIR"
            ) from None

    @classmethod
    def from_home(
        cls,
        home: Path | str | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float | None = 30,
        busy_retries: int = 5,
        reconnect_for: float = RECONNECT_FOR,
        follow_read_timeout: float = FOLLOW_READ_TIMEOUT,
    ) -> Client:
        """A client for the server started with ``danlu up --home home`` (default ``~/.danlu``).

        ``url`` / ``token`` override what the home holds; with both given the home is not read.
        ``transport``, ``timeout``, ``busy_retries``, ``reconnect_for`` and
        ``follow_read_timeout`` are :class:`Client`'s, checked before the home is read.
        The home's admin token goes only to the server the home names: a ``url`` of another
        server without a ``token`` is refused (:class:`NoServerError`), never sent the home's
        credentials. A malformed ``url`` is a :class:`ConfigError` (:func:`server_base`)
        before the home is read: it was told it needed an API token. Environment variables
        are the caller's business (the CLI reads them in danlu.config).
        """
        check_limits(timeout, busy_retries, reconnect_for, follow_read_timeout)
        if url is not None:
            server_base(url)
        if url is None or token is None:
            try:
                found_url, found_token = find_server(home)
            except NoServerError as exc:
                if url is None:
                    raise
                raise NoServerError(
                    f"the server at {shown_url(url)} needs an API token: pass --token or set "
                    f"DANLU_TOKEN ({exc})"
                ) from None
            if token is None and url is not None and not same_server(url, found_url):
                raise NoServerError(
                    f"the server at {shown_url(url)} needs an API token: pass --token or set "
                    "DANLU_TOKEN "
                    f"(the token in {home or DEFAULT_HOME} is for {found_url}, another server)"
                )
            url = url or found_url
            token = token or found_token
        return cls(
            url,
            token,
            transport=transport,
            timeout=timeout,
            busy_retries=busy_retries,
            reconnect_for=reconnect_for,
            follow_read_timeout=follow_read_timeout,
        )

    # -- plumbing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _unavailable(self, exc: httpx.HTTPError, method: str, path: str) -> ServerUnavailable:
        return no_answer(exc, self.url, method, API_PREFIX + path, self._http.timeout.read)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send one request; raise the mapped :class:`ApiError` on a 3xx/4xx/5xx answer. A
        ``json`` body JSON cannot hold (NaN, infinity, an object) is an
        :class:`InvalidRequestError` naming its field, and is not sent."""
        if kwargs.get("json") is not None:
            kwargs["content"] = json_content(kwargs.pop("json"), method, path)
            kwargs["headers"] = {"Content-Type": "application/json", **kwargs.get("headers", {})}
        for attempt in range(self.busy_retries + 1):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                raise self._unavailable(exc, method, path) from None
            if response.status_code < 300:  # a 3xx is not followed: an ApiError
                self._answered = True
                return response
            error = error_from_response(response)
            self._answered = self._answered or not from_proxy(error)  # a proxy's is not its
            if attempt == self.busy_retries or not busy(response, error):
                raise error
            time.sleep(retry_after(response))
        raise AssertionError("unreachable")

    # -- jobs -------------------------------------------------------------------------------

    def wait(
        self,
        jobs: str | Sequence[str],
        *,
        timeout: float | None = None,
        poll: float = 2.0,
        on_end: Callable[[JobDict], None] | None = None,
    ) -> list[JobDict]:
        """Poll the ``jobs`` (ids or unique prefixes; one string: one job) every ``poll``
        seconds (at least :data:`~danlu.client.waits.MIN_POLL`, 0.1: a smaller one is taken
        as that) until each has finished (SUCCEEDED, FAILED or CANCELLED); returns them as
        Jobs, in the order given (a prefix is asked for by the full id of the job it named
        once read: a job submitted meanwhile may share it). ``on_end`` is called with each
        job once it is seen finished. Raises
        :class:`WaitTimeout` after ``timeout`` seconds (None: no limit), and what
        :meth:`get_job` raises for a job that does not exist. A server lost once it has
        answered (a restart) is asked again for up to :attr:`reconnect_for` seconds. Sweeps
        and job arrays: :func:`~danlu.client.waits.wait_all`."""

        ids: dict[str, str] = {}  # a key once answered: its job's full id, asked from then
        # on (a job submitted later may share a prefix, which then is ambiguous: a 409)

        def finished(key: str) -> JobDict | None:
            job = asked_job(self, ids.get(key, key))  # the job asked for, not another
            ids[key] = str(job["id"])
            return job if job.get("state") in FINISHED_STATES else None

        def timed_out(unfinished: list[str], done: list[JobDict]) -> WaitTimeout:
            return WaitTimeout(unfinished, done, float(timeout or 0.0))

        return wait_for(
            self,
            listed(jobs, "jobs"),
            finished,
            timeout=timeout,
            poll=poll,
            timed_out=timed_out,
            on_end=on_end,
            clock=time,  # this module's: tests replace it
        )

    def follow_logs(
        self, job: str, offset: int = 0, *, reconnect_delay: float = 1.0
    ) -> Iterator[str]:
        """:meth:`follow_log_bytes` as text chunks (a character cut between two chunks kept
        whole; bytes that are not UTF-8 each become U+FFFD); ``reconnect_delay`` as there
        (at least :data:`MIN_RECONNECT_DELAY`)."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        chunks = self.follow_log_bytes(job, offset, reconnect_delay=reconnect_delay)
        yield from _decoded(decoder, chunks, final=True)

    def follow_log_bytes(
        self, job: str, offset: int = 0, *, reconnect_delay: float = 1.0
    ) -> Iterator[bytes]:
        """``GET /jobs/{id}/logs?follow=true``: the job's bytes as they are, until the job
        has finished. When the server ends a stream before that (its follow timeout), or it
        brings nothing for :attr:`follow_read_timeout` seconds, the
        follow is opened again from the last byte received (after ``reconnect_delay``
        seconds when that stream brought nothing: at least :data:`MIN_RECONNECT_DELAY`, a
        smaller one, 0 too, is taken as that; a negative, NaN or infinite one is a
        :class:`SpecError` naming it); once the job has finished, what the
        stream may have missed is read with plain requests. Once the server has answered,
        losing it (a control-plane restart) is retried every :data:`RECONNECT_PAUSE` seconds
        from the last byte received, for up to :attr:`reconnect_for` seconds without an
        answer; then :class:`ServerUnavailable`. A follow answered 503 "busy" (the server's
        database was busy) is opened again after its ``Retry-After`` (at most 5 s). ``job``
        may be a unique id prefix: once the job has been read, its full id is asked for (a
        job submitted meanwhile may share the prefix)."""
        check_seconds("reconnect_delay", reconnect_delay)
        check_offset(offset)
        reconnect_delay = max(reconnect_delay, MIN_RECONNECT_DELAY)  # 0: a tight loop
        lost_at: float | None = None  # when the server stopped answering, if it has
        while True:
            received = 0
            seen = b""  # the stream's last bytes, where a truncation's note may have begun
            try:
                for raw in self._follow_stream(job, offset):
                    lost_at = None
                    offset, seen = _offset_after(offset, seen, raw)
                    received += len(raw)
                    yield raw
                info = asked_job(self, job)
                job = str(info["id"])  # from now on: a prefix may grow ambiguous (a 409)
                finished = info.get("state") in FINISHED_STATES
                lost_at = None
                if finished:
                    for raw in self.read_log_bytes(job, offset):
                        offset += len(raw)
                        yield raw
                    return
            except (ServerUnavailable, ServerError) as exc:
                if not out_of_reach(exc):
                    raise
                lost_at = self._reconnect_or_raise(lost_at)
                continue
            if not received:
                time.sleep(reconnect_delay)

    def _reconnect_or_raise(self, lost_at: float | None) -> float:
        """In a follower, after :class:`ServerUnavailable` (or an error
        :func:`~danlu.client.errors.out_of_reach` takes for it): re-raise it when this client has
        never had an answer (no server there) or none for :attr:`reconnect_for` seconds
        since ``lost_at``; else pause :data:`RECONNECT_PAUSE` seconds for the caller to try
        again, and return when the server was lost."""
        now = time.monotonic()
        lost_at = now if lost_at is None else lost_at
        if not self._answered or now - lost_at >= self.reconnect_for:
            raise
        time.sleep(RECONNECT_PAUSE)
        return lost_at

    def _follow_stream(self, job: str, offset: int) -> Iterator[bytes]:
        params: dict[str, str | int] = {"offset": offset, "follow": "true"}
        timeout = httpx.Timeout(self._http.timeout.connect, read=self.follow_read_timeout)
        try:
            with self._http.stream(
                "GET", f"/jobs/{seg(job, 'job')}/logs", params=params, timeout=timeout
            ) as response:
                if response.status_code >= 300:
                    response.read()
                    error = error_from_response(response)
                    if not busy(response, error):
                        raise error
                    time.sleep(retry_after(response))  # changed nothing: the follower
                    return  # opens it again, as after a stream that brought nothing
                self._answered = True
                try:
                    yield from response.iter_bytes()
                except httpx.ReadTimeout:  # a quiet job, or a connection lost without a word:
                    return  # ended as the server's follow timeout ends it, opened again
        except httpx.HTTPError as exc:
            raise self._unavailable(exc, "GET", f"/jobs/{seg(job, 'job')}/logs") from None


T = TypeVar("T")


def read_across_restart(client: Client, read: Callable[[], T]) -> T:
    """``read()``: requests through ``client`` that change nothing, made again while the
    server, once it has answered ``client``, cannot be reached (a control-plane restart),
    for up to :attr:`Client.reconnect_for` seconds, as :meth:`Client.wait` does; then its
    :class:`ServerUnavailable`. For the CLI's loops (``events -f``, ``top``, ``drain
    --wait``, ``metrics -f``)."""
    lost_at: float | None = None
    while True:
        try:
            return read()
        except (ServerUnavailable, ServerError) as exc:
            if not out_of_reach(exc):
                raise
            lost_at = client._reconnect_or_raise(lost_at)


def _offset_after(offset: int, seen: bytes, raw: bytes) -> tuple[int, bytes]:
    """The log offset a follow has reached at ``offset`` once it received ``raw`` after
    ``seen`` (the stream's last bytes before it), and the bytes to keep for the next chunk.
    Past a :data:`LOG_TRUNCATED_NOTE` (the log was truncated; the server sends it again
    from its first byte) the offset counts from 0 again, so that a follow opened again
    later starts where the log's new bytes stopped, not past its end."""
    window = seen + raw
    at = window.rfind(LOG_TRUNCATED_NOTE)
    if at >= 0 and at + len(LOG_TRUNCATED_NOTE) > len(seen):  # the note ends in ``raw``
        offset = len(window) - (at + len(LOG_TRUNCATED_NOTE))
    else:
        offset += len(raw)
    return offset, window[-(len(LOG_TRUNCATED_NOTE) - 1) :]
