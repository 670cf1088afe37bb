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

LOG_OFFSET_HEADER = "X-Danlu-Log-Offset"
METRICS_CURSOR_HEADER = "X-Danlu-Metrics-Cursor"


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
