"""The control plane's background threads: one pass of work every few seconds, or at once
when woken, surviving whatever a pass raises (logged by :class:`RepeatedFailure`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from danlu.server.failures import RepeatedFailure


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
        """Start the thread (no-op while it runs)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run the next pass now."""
        self._wake.set()

    def finish(self) -> None:
        """Let the current pass be the last (callable from within it; does not wait)."""
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float = 30.0) -> None:
        """Wait up to ``timeout`` seconds for the thread to end (after :meth:`finish`)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the thread after its current pass (waiting up to ``timeout`` seconds)."""
        self.finish()
        self.join(timeout)
        self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._work()
                self._failures.worked()
            except Exception as exc:  # the loop must survive anything one pass meets
                self._failures.failed(exc)
            self._wake.wait(self.interval)
            self._wake.clear()
