"""The control plane's background threads: one pass of work every few seconds, or at once
when woken, surviving whatever a pass raises (logged by :class:`RepeatedFailure`), and the
log of the errors a pass met and went on from (:class:`PassErrors`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from danlu.server.failures import RepeatedFailure

ERROR_LOG_SECONDS = 3600.0
"""While one error of a pass recurs, one line counts its repeats at most this often."""


class PeriodicLoop:
    """Calls ``work`` in a daemon thread named ``name``, then waits ``interval`` seconds or
    until :meth:`wake`, until :meth:`stop`. ``label`` and ``recovered`` name the pass in the
    log lines of :class:`RepeatedFailure`."""

    def __init__(
        self,
        name: str,
        interval: float,
        work: Callable[[], object],
        log: logging.Logger,
        label: str,
        recovered: str,
    ) -> None:
        self.name = name
        self.interval = interval
        self._work = work
        self._failures = RepeatedFailure(log, label, recovered)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (no-op while it runs). A thread told to stop whose last pass still
        runs (a :meth:`stop` that returned at its timeout) is waited for first: never two
        threads, nor two passes at once."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            if not self._stop.is_set():
                return
            if thread is threading.current_thread():  # started again from its last pass
                self._stop.clear()
                return
            thread.join()
        self._stop.clear()
        self._wake.clear()  # the first pass runs at once anyway; a stop's wake is spent
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run the next pass now."""
        self._wake.set()

    def finish(self) -> None:
        """Let the current pass be the last (callable from within it; does not wait)."""
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float = 30.0) -> bool:
        """Wait up to ``timeout`` seconds for the thread to end (after :meth:`finish`);
        whether it has ended (or never ran)."""
        thread = self._thread
        if thread is None:
            return True
        if thread is not threading.current_thread():
            thread.join(timeout)
        return not thread.is_alive()

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the thread after its current pass (waiting up to ``timeout`` seconds);
        whether it has ended. One still in its pass is kept (:meth:`start` waits for it)."""
        self.finish()
        ended = self.join(timeout)
        if ended:
            self._thread = None
        return ended

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._work()
                self._failures.worked()
            except Exception as exc:  # the loop must survive anything one pass meets
                self._failures.failed(exc)
            self._wake.wait(self.interval)
            self._wake.clear()


@dataclass
class _Recurring:
    """An error :class:`PassErrors` has logged: when, when last met, and the repeats since."""

    logged: float
    seen: float
    repeats: int = 0


class PassErrors:
    """Logs the errors the passes of a loop met and went on from (strings such as
    ``"purge JOB: [Errno 13] Permission denied: ..."``, one per job the pass could not
    finish): each distinct one as a warning the first time, then, while it recurs, one line
    with how many times it came back at most every ``quiet_s`` seconds, so that one stuck
    job, met every pass, does not flood the log. One not met for ``quiet_s`` is forgotten:
    it is logged at once when it comes back. ``clock``: seconds, monotonic."""

    def __init__(
        self,
        logger: logging.Logger,
        label: str,
        quiet_s: float = ERROR_LOG_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.label = label
        """What met the errors, as the lines begin (``"reconcile"``)."""
        self.quiet_s = quiet_s
        self.clock = clock
        self._recurring: dict[str, _Recurring] = {}

    def note(self, errors: Iterable[str]) -> None:
        """Note the errors of one pass (logging those due)."""
        now = self.clock()
        for error in errors:
            known = self._recurring.get(error)
            if known is None:
                self.logger.warning("%s: %s", self.label, error)
                self._recurring[error] = _Recurring(logged=now, seen=now)
                continue
            known.seen, known.repeats = now, known.repeats + 1
            if now - known.logged >= self.quiet_s:
                self.logger.warning(
                    "%s: %s (met %d more times since it was logged)",
                    self.label,
                    error,
                    known.repeats,
                )
                known.logged, known.repeats = now, 0
        for error, known in list(self._recurring.items()):
            if now - known.seen > self.quiet_s:
                del self._recurring[error]
