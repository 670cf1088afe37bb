"""Per-step metrics: batched, non-blocking POSTs to the danlu API, or a JSONL file.

:meth:`MetricsReporter.report` only appends the record to a deque (thread-safe, no lock, no I/O);
a daemon thread ships the records every ``interval_s`` seconds: as one JSON POST
``{"metrics": [...]}`` to ``{DANLU_API_URL}/api/v1/jobs/{DANLU_JOB_ID}/metrics`` with
``Authorization: Bearer {DANLU_TOKEN}``, or appended as lines to a JSONL file. A network error
never fails training: the batch is kept (up to ``max_pending`` records, oldest dropped first)
and retried on the next flush; ``errors`` and ``dropped`` count what went wrong, and the first
failure of an outage is logged as a WARNING.

Each POST carries an ``Idempotency-Key`` header, a random id of its records. A request that
failed may still have been stored (it timed out while the server, its database busy, went
on and committed it; a gateway answered 502 or 504): it is sent again at the next flush as it
was, alone, with the same body and key, and the API answers a key the job stored already
with the same reply, storing nothing. A request whose records change (a record the server
refused dropped) is another request, with a new key. An API without keys stores a resend
again, as before.

A checkpoint covers steps whose records may still be queued: :meth:`MetricsReporter.seal`
(called as each checkpoint is taken) turns the records queued so far into requests of their
own, whose keys are fixed from then on (never merged with later records), and returns those
not shipped yet; the checkpoint keeps them, and a run resumed from it sends them again
(:meth:`MetricsReporter.resend`), as they were. The API stores a request it has already by its
key once, so the records that arrived before the process died are not stored twice, and those
that did not arrive fill the gap. A JSONL file has no keys: :meth:`~MetricsReporter.seal`
writes its records at once (a local append) instead.

The API refuses a whole request for one record it cannot store (a list value, a ``time`` in
milliseconds, a bad ``step``: :mod:`danlu.core.metric_record`). So the reporter runs the same
checks first and leaves such a record out (counted in ``dropped``, a WARNING once per field and
fault); should a server still refuse a request naming ``metrics.<i>`` (a rule this client does
not know), record ``i`` alone is dropped and the rest sent again.

Only the API's answer counts as stored: a POST is never redirected (a 3xx, say a TLS proxy
sending ``http://`` on to ``https://``, would re-send it as a GET without its records), and a
2xx whose body is not the API's ``{"accepted": n, ...}`` (an SSO login page, another service)
is a failure like a network error: the records are kept, and the WARNING names what answered.
A request too large for the control plane (413, its ``DANLU_MAX_BODY_BYTES``) is split in
halves, each a request of its own whose key follows from the whole's (:func:`_derived_key`:
a resumed run splitting the whole again sends the same halves), down to one record; a record
too large alone is left out with a WARNING. Later requests are no larger than the halves that
went through.

:meth:`MetricsReporter.close` makes a last try bounded by ``close_timeout_s`` (it runs on the
preemption path, within the grace): what it could not ship by then stays unsent, with a
WARNING telling how many records; a checkpoint taken before (the preemption's) holds those of
its steps, and a run resumed from it sends them again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from danlu.core.errors import ConfigError, DanluError
from danlu.core.metric_record import RecordError, check_record
from danlu.train.checks import positive_argument, whole_argument
from danlu.train.metrics_file import RESUMED, ROLLED_BACK, append_lines, cut_after_step
from danlu.train.progress import Progress as Progress  # re-exported: it lived here
from danlu.train.report_requests import (
    _OPENER,
    KEY_HEADER,
    _after,
    _body,
    _check_reply,
    _derived_key,
    _encode,
    _redirected,
    _refused_record,
    _Request,
)

log = logging.getLogger("danlu.train")


MAX_RECORDS_PER_POST = 1000
"""The most records one POST carries (the API refuses more, docs/api.md)."""

MAX_REASONS = 256
"""The most distinct faults a reporter warns about (one WARNING each); later ones are logged
at DEBUG, as the repeats are."""

CLOSE_TIMEOUT_S = 5.0
"""Seconds :meth:`MetricsReporter.close` spends at most on its last try, by default: it runs
as a preempted job exits, within the grace before the SIGKILL (30 s by default)."""

ROLLBACK_FIELD = "rollback"
"""The name a record given to :meth:`MetricsReporter.report` may not hold: the API reads
it as the record's rollback generation, which the reporter sets itself after an
anomaly's rollback (a float was a 422, an integer hid the records of earlier generations)."""

PENDING_LIMIT = 10_000
"""The most records a checkpoint keeps of those not shipped yet (:meth:`MetricsReporter.seal`):
the newest whole requests (an API down for long holds up to ``max_pending``; each checkpoint
copies what it keeps)."""


class _OutOfTime(DanluError):
    """:meth:`MetricsReporter.close`'s deadline has passed: the records not shipped yet stay."""


class MetricsReporter:
    """Ships metric records from a background thread; see the module docstring.

    With neither ``url`` nor ``path`` it is a do-nothing sink that still keeps the last record.
    ``close_timeout_s`` bounds :meth:`close`'s last try; ``clock`` (monotonic seconds) times
    it. ``interval_s``, ``timeout_s`` and ``close_timeout_s`` are positive, finite seconds and
    ``max_pending`` an integer >= 0 (0: a failed flush keeps nothing for the next): anything
    else is a :class:`~danlu.core.errors.ConfigError` naming the argument, as is a ``path``
    that is a directory.
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        token: str | None = None,
        path: str | Path | None = None,
        interval_s: float = 2.0,
        max_pending: int = 100_000,
        timeout_s: float = 5.0,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # a zero, negative or NaN interval spun the shipping thread (an infinite one, or a
        # timeout, raised OverflowError in it); a bool was taken as a number
        self.interval_s = positive_argument("interval_s", interval_s)
        self.timeout_s = positive_argument("timeout_s", timeout_s)
        self.close_timeout_s = positive_argument("close_timeout_s", close_timeout_s)
        self.max_pending = whole_argument("max_pending", max_pending, 0)  # 0: keep none
        self.url = url
        self.token = token
        self.path = Path(path) if path is not None and url is None else None
        if self.path is not None and self.path.is_dir():
            # every append failed ("Is a directory"): the records were kept, then dropped
            raise ConfigError(
                f"the metrics file {str(self.path)!r} is a directory; give metrics_file "
                "(DANLU_METRICS_FILE) the path of a file, such as "
                f"{str(self.path / 'metrics.jsonl')!r}"
            )
        self._clock = clock
        self._deadline: float | None = None
        """When :meth:`close`'s last try ends (on :attr:`_clock`); ``None`` before it."""
        self._per_post = MAX_RECORDS_PER_POST
        """The most records a new request takes: at each 413 (a request too large for the
        server) at most the first half's, for the rest of the run."""
        self._split_told = False
        """True once a WARNING told that the server refuses large requests."""
        self.active = self.url is not None or self.path is not None
        """True when records go somewhere (an API or a file)."""
        self._queue: deque[dict[str, Any]] = deque()
        self._outbox: deque[_Request] = deque()
        """Requests whose records and key are fixed, shipped first, in order, as they are: one
        that failed (the server may have stored it), those :meth:`seal` made (a checkpoint
        holds them) and those :meth:`resend` put back."""
        self._loose: list[dict[str, Any]] = []
        """The records kept for the next flush that are in no request yet, oldest first
        (after the :attr:`_outbox`'s; see :meth:`_trim`)."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._io = threading.Lock()
        """Held while records are shipped: one flush at a time."""
        self._lock = threading.Lock()
        """Guards :attr:`_outbox` and :attr:`_loose` (held briefly, never during I/O, so that
        :meth:`seal` on the training thread does not wait for a POST); taken after
        :attr:`_io` where both are."""
        self.sent = 0
        self.errors = 0
        self.dropped = 0
        self._failing = False
        """True from a failed flush until one ships again (see :meth:`_failed`)."""
        self._last_failure = ""
        """Why the last failed flush failed (for :meth:`close`'s WARNING)."""
        self._reasons: set[tuple[str, str]] = set()
        """The (field, fault) pairs a WARNING told of already (see :meth:`_leave_out`)."""
        self.last: dict[str, Any] | None = None
        self.closed = False
        """True once :meth:`close` ran: a record reported after it is shipped at once."""
        self.rollback = 0
        """The rollback generation of the records reported now (:meth:`rewind`), sent to the
        API as their ``rollback`` field when above 0 (a file is cut back instead)."""
        self.scheduler_batch: int | None = None
        """The global batch size the scheduler last set for this job, from the reply to a
        metrics POST (a ``Rebatch`` changes it without restarting the job); ``None`` until
        a reply carried one. Read it at a step boundary (on the chief rank)."""

    @property
    def _retry(self) -> list[dict[str, Any]]:
        """Every record kept for the next flush, oldest first: the outbox's, then the loose
        ones (a copy, for tests and debugging)."""
        with self._lock:
            return [r for request in self._outbox for r in request.records] + self._loose

    def start(self) -> None:
        """Start the shipping thread (idempotent; a no-op for the do-nothing sink)."""
        if self.active and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="danlu-metrics", daemon=True)
            self._thread.start()

    def report(self, record: dict[str, Any]) -> None:
        """Queue one record (never blocks); for the API, after a rollback (:meth:`rewind`),
        a copy of it carrying ``rollback``, its generation. A record holding
        :data:`ROLLBACK_FIELD` (a script's own metric named ``rollback``) is a
        :class:`~danlu.core.errors.ConfigError` naming it, whatever the sink (the same script
        runs with and without the API); any other fault of a record is found as it is
        shipped (it is left out, with a WARNING). After :meth:`close` (a script's own record
        once its ``with`` block or ``fit`` ended) the record is shipped at once, with a last
        try as :meth:`close`'s: before, it was queued for a thread that had stopped, and lost
        without a word."""
        if isinstance(record, Mapping) and ROLLBACK_FIELD in record:
            raise ConfigError(
                f"a metric record may not hold {ROLLBACK_FIELD!r}: the API reads it as the "
                "record's rollback generation, which danlu.train sets itself after an "
                f"anomaly's rollback; rename the metric (such as {ROLLBACK_FIELD + '_rate'!r})"
            )
        self.last = record
        if self.active:
            marked = self.rollback and self.url is not None and isinstance(record, dict)
            self._queue.append({**record, ROLLBACK_FIELD: self.rollback} if marked else record)
            if self.closed:
                self.close()  # no thread ships it any more

    def flush_soon(self) -> None:
        """Ask the shipping thread to ship what is queued now, without waiting for it (the
        context calls it as it closes, before it waits for a checkpoint being written: the
        records need not wait for the write). Never blocks."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Ship everything queued now (called by the thread, and by :meth:`close`): the
        requests of the outbox first (the one that failed last, those a checkpoint sealed),
        as they are, then the rest in requests of at most :data:`MAX_RECORDS_PER_POST`
        records (fewer after a 413), oldest first. A record that cannot be written, or that
        the API would refuse, is left out (see :meth:`_lines` and :meth:`_ship`); a request
        the server refuses as too large (413) is split (:meth:`_too_large`); one it refuses
        for good (another 4xx than 408 and 429) that names no record of it is dropped and
        counted; on any other failure (an answer that is not the API's included) that
        request and the rest wait for the next flush (:meth:`_trim`). After :meth:`close`'s
        deadline nothing more is sent (nor waited for: a flush under way in the thread)."""
        left_s = self._time_left()
        if left_s <= 0 or not self._io.acquire(timeout=min(left_s, threading.TIMEOUT_MAX)):
            return
        try:
            self._ship_all()
        finally:
            self._io.release()

    def _ship_all(self) -> None:
        """:meth:`flush`'s work (:attr:`_io` held)."""
        while self._time_left() > 0:
            with self._lock:
                request = self._next()
            if request is None:
                return
            try:
                self._ship(request)
                self.sent += len(request.records)
            except _OutOfTime:  # close's deadline: the rest stays (see close)
                return
            except urllib.error.HTTPError as exc:
                self.errors += 1
                if exc.code == 413:
                    self._too_large(request)
                    continue
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    self.dropped += len(request.records)
                    log.warning("metrics refused by the server (HTTP %s): dropped", exc.code)
                else:
                    self._failed(exc)
                    self._trim()
                    return
            except Exception as exc:  # never let reporting break training
                self.errors += 1
                self._failed(exc)
                self._trim()
                return
            with self._lock:  # only this flush takes requests off (resend waits for _io)
                self._outbox.popleft()
            self._failing = False

    def _drain(self) -> None:
        """Move the queued records to :attr:`_loose` (:attr:`_lock` held)."""
        while self._queue:
            self._loose.append(self._queue.popleft())

    def _time_left(self) -> float:
        """Seconds left to :meth:`close`'s deadline (infinite before it is called)."""
        return math.inf if self._deadline is None else self._deadline - self._clock()

    def _unsent(self) -> int:
        """How many records are not shipped yet."""
        with self._lock:
            count = len(self._queue) + len(self._loose)
            return count + sum(len(r.records) for r in self._outbox)

    def _seal_chunk(self) -> None:
        """Make the oldest records of :attr:`_loose` (at most :attr:`_per_post`) a request at
        the end of the outbox, less those :meth:`_lines` leaves out (:attr:`_lock` held)."""
        chunk = self._loose[: self._per_post]
        del self._loose[: self._per_post]
        lines = self._lines(chunk)
        if chunk:
            self._outbox.append(_Request(chunk, lines))

    def _next(self) -> _Request | None:
        """The request to ship next: the outbox's first, else one of the oldest records;
        ``None`` when nothing is left (:attr:`_lock` held)."""
        self._drain()
        while not self._outbox and self._loose:
            self._seal_chunk()
        return self._outbox[0] if self._outbox else None

    def seal(self) -> list[dict[str, Any]]:
        """Called as a checkpoint is taken, on the training thread: the records queued so far
        become requests whose keys are fixed from now on (shipped by the thread as they are,
        never merged with later records); returns the outbox's requests, those not shipped
        yet, for the checkpoint to keep (plain data; the newest, up to
        :data:`PENDING_LIMIT` records) and a run resumed from it to :meth:`resend`. Without
        I/O for the API (the thread ships them; a request being sent now is in the list,
        and should it arrive, its resend is a repeat the API stores nothing of); a JSONL
        file is written now instead (it has no keys to tell a resend from a repeat), and
        the list is then empty unless that write failed. ``[]`` for the do-nothing sink."""
        if not self.active:
            return []
        if self.path is not None:
            with self._io:
                self._ship_all()
        with self._lock:
            self._drain()
            while self._loose:
                self._seal_chunk()
            kept: list[dict[str, Any]] = []
            count = 0
            for request in reversed(self._outbox):
                count += len(request.lines)
                if count > PENDING_LIMIT:
                    break
                kept.append(request.pending())
        kept.reverse()
        return kept

    def resend(self, pending: Any, step: int | None = None) -> int:
        """Put the requests a checkpoint kept (:meth:`seal`) back at the head of the outbox,
        as they were, with their keys (the API stores those that arrived before once);
        called as a run resumes from the checkpoint of ``step``. Returns the number of
        records put back; an item that is not such a request (a checkpoint of another
        version) is left out with a WARNING. A JSONL file first loses the records of steps
        after ``step`` at its end (:func:`~danlu.train.metrics_file.cut_after_step`): the
        run redoes those steps, and their records were in the file twice (the API keeps
        one attempt's by itself). Records reported from now on carry the latest ``rollback``
        generation of those put back (their run's, sealed after its rollbacks)."""
        if self.path is not None and step is not None:
            with self._io:
                self._cut_file(self.path, step)
        if not self.active or pending is None:
            return 0
        items = pending if isinstance(pending, list) else [pending]
        requests = [r for r in map(_Request.restored, items) if r is not None]
        if len(requests) < len(items):
            log.warning(
                "%d of the %d metric requests the checkpoint kept unsent cannot be read: left out",
                len(items) - len(requests),
                len(items),
            )
        with self._io, self._lock:
            self._outbox.extendleft(reversed(requests))
        generations = (r.get("rollback") for q in requests for r in q.records)
        self.rollback = max([self.rollback, *(g for g in generations if type(g) is int)])
        return sum(len(r.records) for r in requests)

    def rewind(self, step: int) -> int:
        """A rollback to the checkpoint of ``step`` (anomaly recovery): the run redoes the
        steps after it, and a JSONL file would hold their records twice, the first try's
        and the replay's (a resume cuts them, :meth:`resend`; a rollback did not). So the
        file loses them at its end (:func:`~danlu.train.metrics_file.cut_after_step`), and
        so do the records not written yet; returns how many of those were dropped. A
        reporter that sends its records to the API drops none: those reported from now on
        carry the next ``rollback`` generation (1, then 2, ...), and the API hides the
        first try's records of the steps the replay reported again."""
        self.rollback += 1
        if self.path is None:
            return 0
        dropped = 0
        with self._io:
            with self._lock:
                self._drain()
                kept = [r for r in self._loose if not _after(r, step)]
                dropped += len(self._loose) - len(kept)
                self._loose[:] = kept
                for request in list(self._outbox):
                    pairs = [
                        (r, line)
                        for r, line in zip(request.records, request.lines, strict=True)
                        if not _after(r, step)
                    ]
                    dropped += len(request.records) - len(pairs)
                    request.records[:] = [r for r, _ in pairs]
                    request.lines[:] = [line for _, line in pairs]
                    if not pairs:
                        self._outbox.remove(request)
            self._cut_file(self.path, step, ROLLED_BACK)
        return dropped

    @staticmethod
    def _cut_file(path: Path, step: int, what: str = RESUMED) -> None:
        """:func:`~danlu.train.metrics_file.cut_after_step` of ``path`` (``what``: why, for
        its WARNING); a file that cannot be cut is a WARNING, never a failed resume or
        rollback."""
        try:
            cut_after_step(path, step, what)
        except OSError as exc:
            log.warning(
                "the metrics file %s could not be cut back to step %d (%s): the records of "
                "the steps this run redoes may be in it twice",
                path,
                step,
                exc,
            )

    def _too_large(self, request: _Request) -> None:
        """The server refused ``request``, the outbox's first, as too large (413, the control
        plane's ``DANLU_MAX_BODY_BYTES``): it becomes its two halves, sent next, each a
        request whose key follows from its own (:func:`_derived_key`: a resumed run that
        sends ``request`` again splits it into the same requests), and new requests take at
        most as many records as the first half. Only a 413 splits a request of the outbox
        (by its bytes, not by that count), so that its halves are the same in every run. A
        request of one record is left out, with a WARNING naming its step and size."""
        count = len(request.lines)
        middle = (count + 1) // 2
        halves = [
            _Request(request.records[part], request.lines[part], _derived_key(request.key, name))
            for part, name in ((slice(None, middle), "1/2"), (slice(middle, None), "2/2"))
        ]
        with self._lock:
            if self._outbox and self._outbox[0] is request:
                self._outbox.popleft()
            if count > 1:
                self._outbox.extendleft(reversed(halves))
                self._per_post = min(self._per_post, middle)
        size = len(_body(request.lines))
        if count <= 1:
            step = request.records[0].get("step") if request.records else None
            message = (
                f"the record of step {step} makes a request of {size} bytes, more than the "
                "control plane takes (HTTP 413: its DANLU_MAX_BODY_BYTES); report fewer or "
                "shorter metric names in one record, or raise DANLU_MAX_BODY_BYTES"
            )
            self._leave_out("", "too large", message, "the server refused it as too large")
            return
        told, self._split_told = self._split_told, True
        log.log(
            logging.DEBUG if told else logging.WARNING,
            "the control plane at %s refused a metrics request of %d records (%d bytes) as too "
            "large (HTTP 413: its DANLU_MAX_BODY_BYTES): it is sent in halves (halved again "
            "while refused), and new requests are made as small as the halves; further "
            "splits are logged at DEBUG",
            self.url,
            count,
            size,
        )

    def _failed(self, exc: BaseException) -> None:
        """A flush could not ship its records (kept for the next): a WARNING at the first
        failure after shipping worked (once, not at every flush of an outage; the records
        were silently lost to a bad URL before), the repeats at DEBUG."""
        where = self.url if self.url is not None else self.path
        self._last_failure = str(exc)
        if self._failing:
            log.debug("metrics shipping to %s failed again: %s", where, exc)
            return
        self._failing = True
        log.warning(
            "metrics cannot be shipped to %s (%s): kept and retried at each flush (up to %d "
            "records); further failures are logged at DEBUG",
            where,
            exc,
            self.max_pending,
        )

    def _trim(self) -> None:
        """After a failed flush: keep what is left for the next one, at most
        :attr:`max_pending` records, the oldest dropped first: a request of the outbox whole,
        never cut down (a part of it is another request, with another key, and would store
        its records again)."""
        with self._lock:
            self._drain()
            overflow = sum(len(r.records) for r in self._outbox) + len(self._loose)
            overflow -= self.max_pending
            while overflow > 0 and self._outbox:
                request = self._outbox.popleft()
                self.dropped += len(request.records)
                overflow -= len(request.records)
            if overflow > 0:
                self.dropped += overflow
                del self._loose[:overflow]

    def _ship(self, request: _Request) -> None:
        """Send ``request``, leaving in it only the records sent (an exception: those not
        sent yet). A 422 naming ``metrics.<i>`` drops record ``i`` and sends the others
        again, as a new request with a new key, :func:`_derived_key` (a record fewer each
        time: at most as many resends as records)."""
        if self.path is not None:
            append_lines(self.path, request.lines)
            return
        while request.lines and self.url is not None:
            try:
                self._post(self.url, request.lines, request.key)
                return
            except urllib.error.HTTPError as exc:
                refused = _refused_record(exc, len(request.lines))
                if refused is None:
                    raise
                self.errors += 1
                index, name, message = refused
                with self._lock:  # seal() may be copying it
                    del request.records[index], request.lines[index]
                    request.key = _derived_key(request.key, index)  # another request
                self._leave_out(name, message, message, "the server refused it")

    def _lines(self, chunk: list[dict[str, Any]]) -> list[str]:
        """Each record of ``chunk`` as a line of JSON; those that cannot be written, or
        (with a ``url``) that :func:`~danlu.core.metric_record.check_record` refuses, are
        left out of ``chunk`` and counted."""
        now = time.time()
        kept: list[dict[str, Any]] = []
        lines: list[str] = []
        for record in chunk:
            try:
                line = _encode(record)
                if self.url is not None:  # what the API gets: JSON's types, not Python's
                    check_record(json.loads(line), "", now)
            except RecordError as exc:
                self._leave_out(exc.field, exc.reason, exc.message, "the API would refuse it")
                continue
            except (TypeError, ValueError, RecursionError) as exc:
                self._leave_out("", "json", str(exc), "it cannot be written as JSON")
                continue
            kept.append(record)
            lines.append(line)
        chunk[:] = kept
        return lines

    def _leave_out(self, field: str, reason: str, message: str, why: str) -> None:
        """Count a record left out; a WARNING naming ``field`` and ``message`` the first
        time a (``field``, ``reason``) pair comes (up to :data:`MAX_REASONS` of them),
        DEBUG after (a script that reports a bad value does so at every step)."""
        self.dropped += 1
        key = (field, reason)
        shown = f"{field}: {message}" if field else message
        if key in self._reasons or len(self._reasons) >= MAX_REASONS:
            log.debug("a metric record was left out (%s): %s", why, shown)
            return
        self._reasons.add(key)
        log.warning(
            "a metric record was left out (%s): %s; the other records are sent, and further "
            "records with this problem are left out with a DEBUG message",
            why,
            shown,
        )

    def _post(self, url: str, lines: list[str], key: str) -> None:
        """POST ``lines`` (records as JSON) to the API at ``url`` in one request named
        ``key`` (the same lines give the same body), within :meth:`close`'s deadline
        (:class:`_OutOfTime` past it). Raises :class:`_NotTheApi` for a redirect (never
        followed) and for a 2xx whose body is not the API's reply."""
        timeout = min(self.timeout_s, self._time_left())
        if timeout <= 0:
            raise _OutOfTime
        body = _body(lines)
        req = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", KEY_HEADER: key},
        )
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with _OPENER.open(req, timeout=timeout) as resp:
                status, reply = int(resp.status), resp.read()
                content_type = str(resp.headers.get("Content-Type") or "")
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                raise _redirected(exc) from exc
            raise
        _check_reply(status, content_type, reply)
        self._note_reply(reply)

    def _note_reply(self, reply: bytes) -> None:
        """Keep the scheduler's batch size from the server's reply (``batch_size``)."""
        with contextlib.suppress(ValueError, AttributeError):
            batch = json.loads(reply or b"{}").get("batch_size")
            # JSON true is an int to Python: it rebatched the job to 1 sample a step
            if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
                self.scheduler_batch = batch

    def close(self) -> None:
        """Stop the thread and ship what is left: one last try, which ends
        ``close_timeout_s`` after the call (a flush of the thread under way stops then too:
        it runs as a preempted job exits, within the grace). A WARNING tells how many
        records were left unsent; they stay in the outbox, and a checkpoint taken before
        (:meth:`seal`) holds those of its steps."""
        self.closed = True
        self._deadline = self._clock() + self.close_timeout_s
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=max(0.0, self._time_left()))
        self.flush()
        unsent = self._unsent()
        if unsent:
            why = ""
            if self._time_left() <= 0:
                why = f" (not taken within close_timeout_s={self.close_timeout_s:g} s)"
            elif self._last_failure:
                why = f" (the last try failed: {self._last_failure})"
            log.warning(
                "%d metric records were left unsent when the reporter closed%s; a checkpoint "
                "holds those of the steps it covers, and a run resumed from it sends them again",
                unsent,
                why,
            )
        if thread is None or not thread.is_alive():
            self._deadline = None  # a later flush ships again; a thread still in a POST stops
