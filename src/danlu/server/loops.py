"""The control plane's background threads: one pass of work every few seconds, or at once
when woken, surviving whatever a pass raises (logged by :class:`RepeatedFailure`), and the
log of the errors a pass met and went on from (:class:`PassErrors`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from danlu.server.failures import RepeatedFailure, failure_kind

log = logging.getLogger(__name__)

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
        self._log = log
        self._label = label
        self._failures = RepeatedFailure(log, label, recovered)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._ending: threading.Thread | None = None
        """The thread that saw its stop and ends (:meth:`_stopped`)."""
        self._control = threading.Lock()
        """Held through each :meth:`start` and :meth:`stop`: two callers starting at once
        both found no thread and started one each (two passes at once), and a stop
        ending as a start began forgot the thread that start made, so the next start made
        another."""

    def start(self, timeout: float = 30.0) -> None:
        """Start the thread (no-op while it runs). A thread told to stop whose last pass still
        runs (a :meth:`stop` that returned at its timeout) is waited for first, up to
        ``timeout`` seconds: never two threads, nor two passes at once. One whose pass still
        runs then is told to go on instead (its stop withdrawn, said in the log): a pass that
        hung no longer holds the caller (an app's start-up) for ever. Callers of
        :meth:`start` and :meth:`stop` take turns."""
        with self._control:
            self._start(timeout)

    def _start(self, timeout: float) -> None:
        """:meth:`start`, its caller holding :attr:`_control`."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            if not self._stop.is_set():
                return
            if thread is threading.current_thread():  # started again from its last pass
                self._stop.clear()
                return
            thread.join(timeout)
            with self._lock:
                if thread is not self._ending:  # still in its pass: it goes on
                    self._stop.clear()
                    self._log.warning(
                        "%s: the last pass of the stopped thread %s still runs after %g s; "
                        "that thread goes on instead of a new one",
                        self._label,
                        self.name,
                        timeout,
                    )
                    return
            thread.join()  # it saw its stop and only returns now
        self._stop.clear()
        self._wake.clear()  # the first pass runs at once anyway; a stop's wake is spent
        self._ending = None
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
        whether it has ended. One still in its pass is kept (:meth:`start` waits for it).
        Callers of :meth:`start` and :meth:`stop` take turns."""
        with self._control:
            self.finish()
            ended = self.join(timeout)
            if ended:
                self._thread = None
            return ended

    def _stopped(self) -> bool:
        """Whether the running thread is to end now (then it is marked as ending, under the
        lock :meth:`start` withdraws a stop under: a stop is withdrawn before the thread
        sees it, or the thread ends)."""
        with self._lock:
            if self._stop.is_set():
                self._ending = threading.current_thread()
                return True
            return False

    def _run(self) -> None:
        while not self._stopped():
            try:
                self._work()
                self._failures.worked()
            except Exception as exc:  # the loop must survive anything one pass meets
                self._failures.failed(exc)
            self._wake.wait(self.interval)
            self._wake.clear()


def clock_due(at: float, now: float, wait: float) -> bool:
    """Whether a loop's step set to run at ``at`` (a wall-clock time, at most ``wait``
    seconds after the time it was set) is due at ``now``: once the clock reaches ``at``, and
    at once when ``at`` is more than ``wait`` seconds ahead of ``now``: the clock was set
    back since (an NTP step after it ran ahead), and the step waited out the whole jump (a
    year ahead, a year with no retention, no nodes read again)."""
    return now >= at or at - now > wait


CLOCK_STEP_SECONDS = 1.0
"""The least difference between the wall clock's and the monotonic clock's advance between
two passes that :class:`ClockSteps` takes for a step of the wall clock. NTP steps an
offset past 128 ms and slews a smaller one at most 500 ppm: a slew is never a step."""

CLOCK_SLEW = 0.0005
"""The most NTP slews the wall clock per second (500 ppm): a pass long after the last one
may see that much more of a difference without a step."""


def steady_clock() -> float:
    """Seconds on a clock that no one sets: Linux's ``CLOCK_BOOTTIME`` (it counts a suspend
    too, as the wall clock does, so that a host or VM suspended and resumed makes no step:
    runs on other machines went on meanwhile), else ``time.monotonic``."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


class ClockSteps:
    """Finds the steps of the wall clock (an NTP step, an admin's ``date -s``) between two
    readings of it taken with a steady clock's (:func:`steady_clock`), which never steps.
    :meth:`step` says how far the wall clock jumped since the reading :meth:`mark` kept
    last (0 when it did not, or when there is none)."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None

    def step(self, wall: float, monotonic: float) -> float:
        """Seconds the wall clock jumped (forward: positive) between the last marked
        reading and ``(wall, monotonic)``: its advance minus the monotonic clock's, when
        that is more than :data:`CLOCK_STEP_SECONDS` (and than a slew could make)."""
        if self._last is None:
            return 0.0
        last_wall, last_mono = self._last
        elapsed = monotonic - last_mono
        jump = (wall - last_wall) - elapsed
        return jump if abs(jump) > max(CLOCK_STEP_SECONDS, CLOCK_SLEW * abs(elapsed)) else 0.0

    @property
    def last_wall(self) -> float | None:
        """The wall clock of the reading kept last (None when none is)."""
        return None if self._last is None else self._last[0]

    def mark(self, wall: float, monotonic: float) -> None:
        """Keep ``(wall, monotonic)`` as the reading the next :meth:`step` compares with."""
        self._last = (wall, monotonic)

    def forget(self) -> None:
        """Drop the kept reading (the next :meth:`step` says 0)."""
        self._last = None


def close_quietly(what: str, close: Callable[[], object]) -> None:
    """Call ``close`` (one step of closing the control plane), logging what it raises: the
    steps after it still run, and an error that stopped a start-up is the one raised."""
    try:
        close()
    except Exception as exc:
        log.warning("closing %s failed: %s", what, exc)


class ClosedAfterUse:
    """Closes a handle that a loop's passes use (an NVML health check, an energy meter) once
    none uses it: at once when none does (:meth:`close`), else as the last use under way
    ends (:meth:`using`). A loop's stop that returned at its timeout, its pass still
    running (:meth:`PeriodicLoop.stop`), closed the handle under that pass: NVML shut down
    under its calls. ``close``: what closes the handle; ``what``: its name in the log line
    of a close that fails as a use ends."""

    def __init__(self, close: Callable[[], object], log: logging.Logger, what: str) -> None:
        self._close = close
        self._log = log
        self._what = what
        self._lock = threading.Lock()
        self._users = 0
        self._due = False
        """:meth:`close` was called (and not withdrawn by :meth:`reopen`)."""
        self.closed = False
        """Whether the handle is closed (for good)."""

    @contextmanager
    def using(self) -> Iterator[bool]:
        """A use of the handle: it is not closed before the block ends (the last use under
        way when :meth:`close` was called closes it as it ends). Yields whether the handle
        is open (a closed one refuses to be used: NVML's raise then)."""
        with self._lock:
            self._users += 1
            usable = not self.closed
        try:
            yield usable
        finally:
            with self._lock:
                self._users -= 1
                close_quietly(self._what, self._close_if_due)  # the use's own outcome stands

    def close(self) -> bool:
        """Close the handle now if nothing uses it, else as the last use under way ends;
        whether it is closed now."""
        with self._lock:
            self._due = True
            self._close_if_due()
            return self.closed

    def release(self, stopped: bool, timeout: float) -> None:
        """:meth:`close` after the loop's stop (``stopped``: whether its thread ended within
        ``timeout`` seconds), with a WARNING when a use under way is left to close it."""
        if not self.close():
            when = "after the stop" if stopped else f"{timeout:g} s after the stop"
            self._log.warning(
                "%s is still in use %s; it is released as that use ends", self._what, when
            )

    def reopen(self) -> bool:
        """Withdraw a :meth:`close` left to a use under way (a loop started again while its
        stopped pass still ran); whether the handle is open (False: it was closed)."""
        with self._lock:
            self._due = False
            return not self.closed

    def _close_if_due(self) -> None:
        """Close the handle if :meth:`close` was called and nothing uses it (under the lock:
        no use begins while it closes)."""
        if self._due and not self._users and not self.closed:
            self.closed = True
            self._close()


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
    with how many times it came back (and its latest text) at most every ``quiet_s``
    seconds, so that one stuck job, met every pass, does not flood the log. Two errors are
    the same when they differ only in the numbers of what follows their ``STEP JOB:``
    (:func:`recurring_kind`): an outage's message that tells how long it has lasted
    ("not answered for 37 s") was a new error every pass, a warning for every job every
    pass, each kept for ``quiet_s``. One not met for ``quiet_s`` is forgotten: it is logged
    at once when it comes back. ``clock``: seconds, monotonic."""

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
            kind = recurring_kind(error)
            known = self._recurring.get(kind)
            if known is None:
                self.logger.warning("%s: %s", self.label, error)
                self._recurring[kind] = _Recurring(logged=now, seen=now)
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
        for kind, known in list(self._recurring.items()):
            if now - known.seen > self.quiet_s:
                del self._recurring[kind]


def recurring_kind(error: str) -> str:
    """What makes two of a pass's errors (``"STEP JOB: why"``) the same for
    :class:`PassErrors`: the same step and job (what comes before the first ``": "``, kept
    whole), and the same why but for the ids and numbers in it
    (:func:`~danlu.server.failures.failure_kind`)."""
    subject, colon, why = error.partition(": ")
    return subject + colon + failure_kind(why) if colon else failure_kind(error)
