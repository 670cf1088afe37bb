"""The :class:`~danlu.client.rest.Client`'s reads of what a job leaves (:class:`JobRecords`):
its events and the event feed, its metrics (posted and read) and its log read to its current
end, over the ``request`` the client defines (following a log as it grows stays in
:mod:`danlu.client.rest`)."""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import httpx

from danlu.client.account_calls import AccountCalls
from danlu.client.bodies import check_offset, clean, listed, metric_records, seg
from danlu.client.replies import header_count, malformed, next_log_offset, records
from danlu.core.values import check_positive_int

LOG_OFFSET_HEADER = "X-Danlu-Log-Offset"
METRICS_CURSOR_HEADER = "X-Danlu-Metrics-Cursor"
METRICS_NEXT_HEADER = "X-Danlu-Metrics-Next"
"""The header of a page of metric records by step: the ``next`` of the page after it."""
METRICS_PAGE = 1000
"""Records asked for per request by :meth:`JobRecords.iter_metrics` (the API's default)."""


class JobRecords(AccountCalls):
    """The requests that read a job's events, metrics and log, and post its metrics."""

    def events(
        self, job: str, after_id: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """``GET /jobs/{id}/events``: the job's state changes with their reasons."""
        params = clean({"after_id": after_id, "limit": limit})
        return self._records("GET", f"/jobs/{seg(job, 'job')}/events", params=params)

    def feed(
        self,
        *,
        since: float | None = None,
        after_id: int | None = None,
        project: str | None = None,
        user: str | None = None,
        state: str | Sequence[str] | None = None,
        limit: int | None = None,
        tail: bool = False,
    ) -> list[dict[str, Any]]:
        """``GET /events``: every job's state changes (a non-admin: their own jobs'), the
        oldest first, from ``since`` and after event ``after_id``; ``tail``: the newest
        ``limit`` of them."""
        params = clean(
            {
                "since": since,
                "after_id": after_id,
                "project": project,
                "user": user,
                "state": listed(state, "state"),
                "limit": limit,
                "tail": "true" if tail else None,
            }
        )
        return self._records("GET", "/events", params=params)

    def _log_reply(self, job: str, offset: int) -> httpx.Response:
        """``GET /jobs/{id}/logs`` from byte ``offset``: one chunk of the log."""
        params = {"offset": check_offset(offset)}
        return self.request("GET", f"/jobs/{seg(job, 'job')}/logs", params=params)

    def _log_bytes(self, job: str, offset: int) -> tuple[bytes, int]:
        response = self._log_reply(job, offset)
        raw = response.content
        next_offset = header_count(response, LOG_OFFSET_HEADER)
        return raw, offset + len(raw) if next_offset is None else next_offset

    def logs(self, job: str, offset: int = 0) -> tuple[str, int]:
        """``GET /jobs/{id}/logs``: one chunk of the log (the server sends at most 1 MiB a
        request) from byte ``offset``, and the next offset; :meth:`read_logs` reads it all."""
        raw, next_offset = self._log_bytes(job, offset)
        return raw.decode("utf-8", errors="replace"), next_offset

    def read_logs(self, job: str, offset: int = 0) -> Iterator[str]:
        """The whole log from byte ``offset`` as text chunks (bytes that are not UTF-8 each
        become U+FFFD): :meth:`read_log_bytes`, decoded."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        yield from _decoded(decoder, self.read_log_bytes(job, offset), final=True)

    def log_runs(self, job: str) -> list[dict[str, Any]]:
        """``GET /jobs/{id}/logs/runs``: where each run of the job that the server's executor
        still knows of begins in its log, oldest first: ``[{"attempt", "offset",
        "started_at"}]`` (``offset``: the byte of the log where the run's output begins)."""
        return self._records("GET", f"/jobs/{seg(job, 'job')}/logs/runs")

    def read_log_bytes(self, job: str, offset: int = 0) -> Iterator[bytes]:
        """The whole log from byte ``offset``, the job's bytes as they are: ``GET
        /jobs/{id}/logs`` again from each next offset until a request brings no more. A reply
        with bytes but no ``X-Danlu-Log-Offset`` past ``offset`` (a proxy's page answered to
        every request) is a :class:`ServerError` saying so, its bytes not yielded: reading on
        by their length asked for ever and yielded the page each time."""
        while True:
            response = self._log_reply(job, offset)
            raw = response.content
            if not raw:
                return
            offset = next_log_offset(response, LOG_OFFSET_HEADER, offset, len(raw))
            yield raw

    def post_metrics(self, job: str, metrics: Iterable[Mapping[str, Any]]) -> int:
        """``POST /jobs/{id}/metrics``: returns how many records were accepted. ``metrics``
        is a list of records (one record alone, or a record that is not a mapping, is an
        :class:`InvalidRequestError` naming it, not sent)."""
        path = f"/jobs/{seg(job, 'job')}/metrics"
        body = {"metrics": metric_records(metrics, "POST", path)}
        return int(self._field("POST", path, "accepted", int, json=body))

    def metrics(
        self,
        job: str,
        after_step: int | None = None,
        limit: int | None = None,
        *,
        tail: bool = False,
        superseded: bool = False,
    ) -> list[dict[str, Any]]:
        """``GET /jobs/{id}/metrics``: records after ``after_step``, by step (the first
        ``limit``, or with ``tail`` the last), without those a later attempt of the job went
        back over; with ``superseded`` those too, each with its ``attempt`` and whether it
        is ``superseded``."""
        wanted = {
            "after_step": after_step,
            "limit": limit,
            "tail": "true" if tail else None,
            "superseded": "true" if superseded else None,
        }
        params = clean(wanted)
        return self._records("GET", f"/jobs/{seg(job, 'job')}/metrics", params=params)

    def metrics_page(
        self,
        job: str,
        *,
        after_id: int | None = None,
        limit: int | None = None,
        tail: bool = False,
        superseded: bool = False,
    ) -> tuple[list[dict[str, Any]], int]:
        """``GET /jobs/{id}/metrics`` with its cursor: without ``after_id``, the records by
        step (the first ``limit``, or with ``tail`` the last; with ``superseded`` those a
        later attempt went back over too) and the cursor of the records stored from now on;
        with it, every record stored after that cursor in the order they came, each with its
        ``attempt`` and whether it is ``superseded``, and the cursor after them. Following a
        job is ``after_id=`` the cursor each time: every record once, whatever its step."""
        wanted = {
            "after_id": after_id,
            "limit": limit,
            "tail": "true" if tail else None,
            "superseded": "true" if superseded else None,
        }
        response = self.request("GET", f"/jobs/{seg(job, 'job')}/metrics", params=clean(wanted))
        cursor = header_count(response, METRICS_CURSOR_HEADER)
        if cursor is None:
            raise malformed(response, f"no {METRICS_CURSOR_HEADER} header of ASCII digits")
        return records(response), cursor

    def _step_page(
        self,
        job: str,
        after: str | None,
        after_step: int | None,
        limit: int | None,
        superseded: bool,
    ) -> httpx.Response:
        """``GET /jobs/{id}/metrics``, a page by step (:meth:`metrics_by_step`)."""
        wanted = {
            "next": after,
            "after_step": after_step,
            "limit": limit,
            "superseded": "true" if superseded else None,
        }
        return self.request("GET", f"/jobs/{seg(job, 'job')}/metrics", params=clean(wanted))

    def metrics_by_step(
        self,
        job: str,
        *,
        after: str | None = None,
        after_step: int | None = None,
        limit: int | None = None,
        superseded: bool = False,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """``GET /jobs/{id}/metrics``, a page by step: the records after position ``after``
        (the position this returned for the page before; none: from the first step), of a
        step above ``after_step``, at most ``limit`` (more when one step has more, up to the
        API's largest page), and the position after them (``X-Danlu-Metrics-Next``; None
        from a server older than positions, which sends none)."""
        response = self._step_page(job, after, after_step, limit, superseded)
        return records(response), response.headers.get(METRICS_NEXT_HEADER) or None

    def iter_metrics(
        self,
        job: str,
        *,
        after_step: int | None = None,
        superseded: bool = False,
        page: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Every record of the job by step (of a step above ``after_step``; with
        ``superseded`` those a later attempt went back over too, each with its ``attempt``
        and whether it is ``superseded``), however many, also of one step: pages of
        :meth:`metrics_by_step`, ``page`` records each (default :data:`METRICS_PAGE`), each
        read after the position of the one before, until a page brings none.

        A server older than positions (no ``X-Danlu-Metrics-Next``) is read on with
        ``after_step`` = the last step read, as clients did before: of a step of more records
        than its largest page (10,000), the rest is lost. A page whose position is the one it
        was read after, or, from such a server, whose last step is not past ``after_step``,
        is a :class:`ServerError` saying so (the reading would never end), once its records
        are yielded."""
        limit = METRICS_PAGE if page is None else page
        check_positive_int("page", limit)  # before a request
        position: str | None = None
        while True:
            response = self._step_page(job, position, after_step, limit, superseded)
            rows = records(response)
            yield from rows
            if not rows:
                return
            following = response.headers.get(METRICS_NEXT_HEADER) or None
            if following is None:  # a server older than positions: by step
                after_step = _last_step(response, rows, after_step)
            elif following == position:
                raise malformed(
                    response,
                    f"header {METRICS_NEXT_HEADER} is {following[:40]!r}, the position the page "
                    "was read after: the pages would never end",
                )
            position = following


def _last_step(
    response: httpx.Response, rows: Sequence[dict[str, Any]], after_step: int | None
) -> int:
    """The step of the last of ``rows`` (a page by step read with ``after_step``, without a
    position), from which the pages are read on; :func:`malformed` when it is not a whole
    number past ``after_step``."""
    step = rows[-1].get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        problem = f"a record's step is {step!r:.40}, not a whole number"
    elif after_step is not None and step <= after_step:
        problem = f"a page of the steps after {after_step} ends at step {step}"
    else:
        return step
    raise malformed(response, f"{problem}: the pages by step cannot be read on")


def _decoded(
    decoder: codecs.IncrementalDecoder,
    chunks: Iterator[bytes],
    received: list[int] | None = None,
    *,
    final: bool = False,
) -> Iterator[str]:
    """The text of ``chunks`` through ``decoder`` (a character cut between two chunks is
    kept whole), adding their byte count to ``received[0]``; ``final``: then the decoder's
    tail."""
    for raw in chunks:
        if received is not None:
            received[0] += len(raw)
        text = decoder.decode(raw)
        if text:
            yield text
    if final and (tail := decoder.decode(b"", final=True)):
        yield tail
