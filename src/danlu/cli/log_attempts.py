"""``danlu logs``' separator lines: where each attempt (run) of a job begins in its log.

A job's log holds the output of all its runs one after another (a restart, a preemption, a
resize: each start is a new attempt). ``GET /jobs/{id}/logs/runs`` says at which byte of the
log each run the server's executor still knows of began; :class:`AttemptMarks` writes the
log's bytes as they are, with a line of its own before the first byte of each run but the
log's first: ``── attempt 2 (started 2025-06-01 12:00:03) ──``. A run that wrote nothing
still gets its line (the next run's, or the log's end, follows it at once).

Following a log, the runs are asked for again whenever output comes after a pause of
:data:`PAUSE` seconds or more: a new run starts only once its previous run exited and the
control plane launched it again, so its first bytes come after such a pause. A run whose
start is learned only once its first bytes were written gets no line; nor does any run once
the log was truncated (its offsets then name other bytes).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from danlu.client import Client
from danlu.client.errors import NotFoundError
from danlu.client.rest import LOG_TRUNCATED_NOTE
from danlu.core.errors import DanluError

PAUSE = 0.5
"""Seconds without output after which a follow asks again where the runs begin (the server's
follow looks at a quiet log every quarter of a second)."""


@dataclass(frozen=True, slots=True)
class RunMark:
    """One run's start in the log: ``offset`` is the byte of the log its output begins at."""

    attempt: int
    offset: int
    started_at: float | None


def run_marks(reply: Iterable[Any]) -> list[RunMark]:
    """The runs of a ``GET /jobs/{id}/logs/runs`` reply, by offset (an entry that is not
    an object with a whole ``attempt`` and ``offset``, 0 or more, is left out: a reply of
    another version's is no reason to stop printing the log)."""
    out = []
    for item in reply:
        if not isinstance(item, dict):
            continue
        attempt, offset, started = item.get("attempt"), item.get("offset"), item.get("started_at")
        if not (isinstance(attempt, int) and isinstance(offset, int)) or offset < 0:
            continue
        if isinstance(attempt, bool) or isinstance(offset, bool):
            continue
        when = None
        if isinstance(started, int | float) and not isinstance(started, bool):
            when = float(started) if math.isfinite(started) else None
        out.append(RunMark(attempt, offset, when))
    return sorted(out, key=lambda run: run.offset)


def separator(run: RunMark) -> str:
    """The line (without its line break) that marks where ``run`` begins."""
    when = ""
    if run.started_at is not None:
        try:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started_at))
            when = f" (started {stamp})"
        except (OverflowError, OSError, ValueError):  # a time no calendar holds
            when = ""
    return f"── attempt {run.attempt}{when} ──"


class AttemptMarks:
    """Writes a job's log (:meth:`write` for each chunk read from its first byte on, then
    :meth:`finish`) through ``write``, with a :func:`separator` line before each run's first
    byte but the log's first. ``runs`` asks the server where the runs begin (a
    ``GET /jobs/{id}/logs/runs`` reply); ``clock`` times the pauses of a follow."""

    def __init__(
        self,
        runs: Callable[[], list[dict[str, Any]]],
        write: Callable[[bytes], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._runs = runs
        self._write = write
        self._clock = clock
        self._marks: list[RunMark] = []
        self._offset = 0
        """The log's byte the next byte written is (what was written so far)."""
        self._line_open = False
        """Whether the last byte written ends no line (a separator starts a new one)."""
        self._seen = b""
        """The last bytes of a follow, where a truncation's note may have begun."""
        self._off = False
        """Set once a follow said the log was truncated: the offsets name other bytes."""
        self._last: float | None = None
        """When a follow last brought bytes."""
        self.refresh()

    def refresh(self) -> None:
        """Ask the server where the runs begin."""
        self._marks = run_marks(self._runs())

    def write(self, chunk: bytes) -> None:
        """Write ``chunk``, the log's next bytes, with the lines of the runs that begin in
        it."""
        if not chunk:
            return
        if self._off:
            self._put(chunk)
            return
        end = self._offset + len(chunk)
        for run in [r for r in self._marks if r.offset > 0 and self._offset <= r.offset < end]:
            cut = run.offset - self._offset
            self._put(chunk[:cut])
            chunk = chunk[cut:]
            self._mark(run)
        self._put(chunk)

    def follow(self, chunk: bytes) -> None:
        """:meth:`write` for a chunk of a follow: the runs are asked for again first when it
        comes after a pause (:data:`PAUSE`); past a truncation's note no line is written
        any more."""
        if not chunk:
            return
        now = self._clock()
        if not self._off and (self._last is None or now - self._last >= PAUSE):
            # a question that fails (the server restarting) keeps what was known: the
            # follow itself waits the server out
            with contextlib.suppress(DanluError):
                self.refresh()
        self._last = now
        window = self._seen + chunk
        at = window.rfind(LOG_TRUNCATED_NOTE)
        self._seen = window[-(len(LOG_TRUNCATED_NOTE) - 1) :]
        if at >= 0 and at + len(LOG_TRUNCATED_NOTE) > len(window) - len(chunk):
            self._off = True  # the note ends in this chunk
        self.write(chunk)

    def finish(self) -> None:
        """Mark the runs that begin at the log's end: they wrote nothing (yet)."""
        if self._off:
            return
        for run in self._marks:
            if 0 < run.offset == self._offset:
                self._mark(run)

    def _mark(self, run: RunMark) -> None:
        line = ("\n" if self._line_open else "") + separator(run) + "\n"
        self._write(_encoded(line))
        self._line_open = False

    def _put(self, data: bytes) -> None:
        if not data:
            return
        self._write(data)
        self._offset += len(data)
        self._line_open = not data.endswith(b"\n")


def _encoded(line: str) -> bytes:
    """``line`` in stdout's encoding; its box-drawing dashes as ``--`` where that cannot
    write them (an ASCII locale)."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    try:
        return line.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return line.replace("─", "-").encode("ascii", errors="replace")


def attempt_marks(
    client: Client, job: str, write: Callable[[bytes], None], wanted: bool | None, terminal: bool
) -> AttemptMarks | None:
    """The :class:`AttemptMarks` that write job ``job``'s log through ``write``, or None
    where no line is wanted: ``wanted`` (``--separators``/``--no-separators``), else
    whether stdout is a ``terminal`` (the log's bytes stay as they are into a pipe or a file).
    A server without ``GET /jobs/{id}/logs/runs`` (an older one) leaves every line out; a
    job that does not exist is then told by the log's own read."""

    def runs() -> list[dict[str, Any]]:
        try:
            return client.log_runs(job)
        except NotFoundError:
            return []

    if not (terminal if wanted is None else wanted):
        return None
    return AttemptMarks(runs, write)
