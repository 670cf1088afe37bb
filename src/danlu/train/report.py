"""Per-step metrics: batched, non-blocking POSTs to the danlu API, or a JSONL file.

:meth:`MetricsReporter.report` only appends the record to a deque (thread-safe, no lock, no I/O);
a daemon thread ships the records every ``interval_s`` seconds: as one JSON POST
``{"metrics": [...]}`` to ``{DANLU_API_URL}/api/v1/jobs/{DANLU_JOB_ID}/metrics`` with
``Authorization: Bearer {DANLU_TOKEN}``, or appended as lines to a JSONL file. A network error
never fails training: the batch is kept (up to ``max_pending`` records, oldest dropped first)
and retried on the next flush; ``errors`` and ``dropped`` count what went wrong, and the first
failure of an outage is logged as a WARNING.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import threading
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any

log = logging.getLogger("danlu.train")


MAX_RECORDS_PER_POST = 1000
"""The most records one POST carries (the API refuses more, docs/api.md)."""


def _finite(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with NaN and infinities as null: JSON has no such numbers (the API stores
    them as null anyway)."""
    if all(not isinstance(v, float) or math.isfinite(v) for v in record.values()):
        return record
    return {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()
    }


def _plain(value: Any) -> Any:
    """A value ``json`` cannot write as it is: a NumPy or torch scalar as its number (NaN as
    null), anything else as its text."""
    item = getattr(value, "item", None)
    if callable(item):
        try:
            number = item()
        except (TypeError, ValueError, RuntimeError):  # not a one-element value
            return str(value)
        if isinstance(number, float) and not math.isfinite(number):
            return None
        return number
    return str(value)


def _encode_records(records: list[dict[str, Any]]) -> list[str]:
    """Each record as one line of JSON, leaving out those that cannot be written (a nested
    NaN, say), so that one odd value a user reported does not hold up every record after
    it."""
    lines: list[str] = []
    for record in records:
        try:
            lines.append(json.dumps(_finite(record), allow_nan=False, default=_plain))
        except (TypeError, ValueError) as exc:
            log.warning("a metric record cannot be written as JSON (%s): dropped", exc)
    return lines


class MetricsReporter:
    """Ships metric records from a background thread; see the module docstring.

    With neither ``url`` nor ``path`` it is a do-nothing sink that still keeps the last record.
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
    ) -> None:
        self.url = url
        self.token = token
        self.path = Path(path) if path is not None and url is None else None
        self.interval_s = interval_s
        self.max_pending = max_pending
        self.timeout_s = timeout_s
        self.active = self.url is not None or self.path is not None
        """True when records go somewhere (an API or a file)."""
        self._queue: deque[dict[str, Any]] = deque()
        self._retry: list[dict[str, Any]] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._io = threading.Lock()
        self.sent = 0
        self.errors = 0
        self.dropped = 0
        self._failing = False
        """True from a failed flush until one ships again (see :meth:`_failed`)."""
        self.last: dict[str, Any] | None = None
        self.scheduler_batch: int | None = None
        """The global batch size the scheduler last set for this job, from the reply to a
        metrics POST (a ``Rebatch`` changes it without restarting the job); ``None`` until
        a reply carried one. Read it at a step boundary (on the chief rank)."""

    def start(self) -> None:
        """Start the shipping thread (idempotent; a no-op for the do-nothing sink)."""
        if self.active and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="danlu-metrics", daemon=True)
            self._thread.start()

    def report(self, record: dict[str, Any]) -> None:
        """Queue one record (never blocks, never raises)."""
        self.last = record
        if self.active:
            self._queue.append(record)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Ship everything queued now (called by the thread, and by :meth:`close`): in
        requests of at most :data:`MAX_RECORDS_PER_POST` records, oldest first. A request
        the server refuses for good (a 4xx other than 408 and 429) is dropped and counted;
        on any other failure the rest waits for the next flush."""
        with self._io:
            batch = self._retry
            self._retry = []
            while self._queue:
                batch.append(self._queue.popleft())
            while batch:
                chunk = batch[:MAX_RECORDS_PER_POST]
                try:
                    unwritable = self._ship(chunk)
                    self.dropped += unwritable
                    self.sent += len(chunk) - unwritable
                except urllib.error.HTTPError as exc:
                    self.errors += 1
                    if 400 <= exc.code < 500 and exc.code not in (408, 429):
                        self.dropped += len(chunk)
                        log.warning("metrics refused by the server (HTTP %s): dropped", exc.code)
                    else:
                        self._failed(exc)
                        self._keep(batch)
                        return
                except Exception as exc:  # never let reporting break training
                    self.errors += 1
                    self._failed(exc)
                    self._keep(batch)
                    return
                self._failing = False
                batch = batch[len(chunk) :]

    def _failed(self, exc: BaseException) -> None:
        """A flush could not ship its records (kept for the next): a WARNING at the first
        failure after shipping worked (once, not at every flush of an outage; the records
        were silently lost to a bad URL before), the repeats at DEBUG."""
        where = self.url if self.url is not None else self.path
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

    def _keep(self, batch: list[dict[str, Any]]) -> None:
        """Keep ``batch`` for the next flush, at most :attr:`max_pending` (oldest dropped)."""
        overflow = len(batch) - self.max_pending
        if overflow > 0:
            self.dropped += overflow
            batch = batch[overflow:]
        self._retry = batch

    def _ship(self, batch: list[dict[str, Any]]) -> int:
        """Send ``batch``; how many of its records could not be written and were left out."""
        lines = _encode_records(batch)
        if self.url is not None:
            body = ('{"metrics": [' + ", ".join(lines) + "]}").encode()
            req = urllib.request.Request(
                self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
            )
            if self.token:
                req.add_header("Authorization", f"Bearer {self.token}")
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                reply = resp.read()
            self._note_reply(reply)
        elif self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.writelines(line + "\n" for line in lines)
        return len(batch) - len(lines)

    def _note_reply(self, reply: bytes) -> None:
        """Keep the scheduler's batch size from the server's reply (``batch_size``)."""
        with contextlib.suppress(ValueError, AttributeError):
            batch = json.loads(reply or b"{}").get("batch_size")
            if isinstance(batch, int) and batch > 0:
                self.scheduler_batch = batch

    def close(self) -> None:
        """Stop the thread and ship what is left (one last try)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)
            self._thread = None
        self.flush()


class Progress:
    """A Rich progress bar on an interactive terminal (rank 0), a no-op elsewhere.

    Updated every ``every`` steps so it costs nothing measurable.
    """

    def __init__(self, total: int | None, enabled: bool | None = None, every: int = 10) -> None:
        self.enabled = sys.stdout.isatty() if enabled is None else enabled
        self.every = max(1, every)
        self._bar: Any = None
        self._task: Any = None
        if self.enabled:
            with contextlib.suppress(ImportError):
                from rich.progress import Progress as _RichProgress

                self._bar = _RichProgress(transient=False)
                self._task = self._bar.add_task("training", total=total)
                self._bar.start()

    def update(self, step: int, record: dict[str, Any]) -> None:
        """Show ``step`` and the record's loss."""
        if self._bar is None or step % self.every:
            return
        loss = record.get("loss")
        desc = f"step {step} loss {loss:.4g}" if isinstance(loss, float) else f"step {step}"
        self._bar.update(self._task, completed=step, description=desc)

    def close(self) -> None:
        """Stop the bar."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
