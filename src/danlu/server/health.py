"""The health loop: every ``interval`` seconds it closes to new work the GPUs NVML finds faulty
(:mod:`danlu.devices.health`) and, with an admin's health program, the nodes of this host
while the program fails.

**GPUs.** A pass reads the health check with no transaction open, then cordons the faulty
GPUs that are still open in one short write transaction
(:func:`~danlu.server.services.nodes.close_faulty`): the scheduler puts nothing new on them,
and the jobs there run on (as Slurm's node health check drains a node: no new work), or,
with ``drain`` (``DANLU_HEALTH_DRAIN=1``), are preempted by checkpoint and resume on
other GPUs (a GPU with uncorrectable memory errors may be computing wrong results). An
admin opens a GPU again with ``danlu uncordon NODE --gpu N`` once it is mended; a fault that
lasts closes it again at the next pass. When the write fails (a busy
store), the faults read are kept and written by the next pass: an Xid event is read once.

**A run that fails on a faulty GPU** is not the job's fault: when a run fails, the reconcile
loop asks :meth:`HealthLoop.blame` first, which makes a pass at once (at most one a
second) and names the run's GPUs the health check closed since the run started. The job then
resumes from its last checkpoint elsewhere, as a job lost with its node does, with no
restart counted against its ``max_restarts``.

**The health program** (``DANLU_HEALTH_PROGRAM``, as Slurm's ``HealthCheckProgram``): an
executable run with no arguments and no shell, in a session of its own. Exiting 0 is a pass;
anything else, or running over :data:`PROGRAM_TIMEOUT` seconds (it is killed then, with what
it started), is a failure, whose reason is the first line it printed. It is judged when it
exits: a process it leaves running (a daemon it restarted) is left alone, even while it
holds the program's output open. It runs at every pass, also when the GPU check fails
(NVML gone with the driver: the host is sick then). On a failure this
host's nodes are cordoned (:func:`~danlu.server.services.nodes.close_marked`); on a pass
the nodes it closed are opened again (:func:`~danlu.server.services.nodes.reopen_marked`),
and a node an admin closed stays closed. A program that cannot be started is logged, and
changes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from danlu.core.values import controls_replaced
from danlu.devices.health import GpuFault, HealthCheck
from danlu.server.db import Database
from danlu.server.loops import ClosedAfterUse, PeriodicLoop
from danlu.server.services import nodes
from danlu.server.services.common import resolve_now

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 30.0
"""Seconds between two health passes (``DANLU_HEALTH_INTERVAL``)."""
PROGRAM_TIMEOUT: Final = 60.0
"""Seconds the health program may run before it is killed and counted as a failure."""
_REASON_CHARACTERS: Final = 300
_KEPT_BYTES: Final = 64 * 1024
"""Bytes of each of the program's outputs kept for its reason (the rest is read and
dropped)."""
_READ_BYTES: Final = 64 * 1024
_POLL_SECONDS: Final = 0.1
"""Seconds between two looks at whether the program has exited while it prints nothing."""
_DRAIN_SECONDS: Final = 1.0
"""Seconds at most to read what is left in the pipes once the program has exited (more
only when a process it left behind keeps writing)."""
BLAME_PASS_SECONDS: Final = 1.0
"""A failed run's :meth:`HealthLoop.blame` makes a GPU pass unless one ended this many
seconds ago (many runs failing at once cost one pass)."""


@dataclass(frozen=True, slots=True)
class ProgramResult:
    """What one run of the health program said: ``passed``, or why not."""

    passed: bool
    reason: str = ""


def _first_line(*outputs: bytes) -> str:
    """The first line of ``outputs`` with text, for a node's cordon reason: a tab read as a
    space, every other control character as ``?`` (a NUL, which PostgreSQL's text cannot
    hold, failed every pass's write, so the node was never closed; a terminal's escape
    sequences would reach whoever lists the nodes)."""
    for output in outputs:
        for line in output.decode("utf-8", errors="replace").splitlines():
            shown = controls_replaced(line.replace("\t", " ")).strip()
            if shown:
                return shown[:_REASON_CHARACTERS]
    return ""


class HealthProgram:
    """An admin's executable at ``path`` (absolute: the setting is checked so), run by
    :meth:`run`."""

    def __init__(self, path: str, timeout: float = PROGRAM_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout

    def check(self) -> str | None:
        """Why the program cannot be run (None: it can): for the start-up check."""
        program = Path(self.path)
        if not program.is_file():
            return f"{self.path} is not a file"
        if not os.access(program, os.X_OK):
            return f"{self.path} is not executable (chmod +x it)"
        return None

    def run(self) -> ProgramResult | None:
        """Run the program once; None when it could not be started. It is judged when it
        exits, by its exit status: a process it leaves running (a daemon it restarted) may
        hold its output open, and is neither waited for nor read from after the program
        exits (nor killed)."""
        try:
            child = subprocess.Popen(
                [self.path],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            log.warning("the health program %s cannot start: %s", self.path, exc.strerror)
            return None
        pipes = [pipe for pipe in (child.stdout, child.stderr) if pipe is not None]
        try:
            said = _read_until_exit(child, pipes, self.timeout)
        finally:
            for pipe in pipes:
                pipe.close()
        if said is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()  # killed: it goes at once (its pipes are closed already)
            return ProgramResult(False, f"{self.path} ran over {self.timeout:g} s")
        if child.returncode == 0:
            return ProgramResult(True)
        reason = _first_line(*said) or "no output"
        return ProgramResult(False, f"{reason} (exit status {child.returncode})")


def _read_until_exit(
    child: subprocess.Popen[bytes], pipes: Sequence[IO[bytes]], timeout: float
) -> list[bytes] | None:
    """What ``child`` printed on each of ``pipes`` (the first :data:`_KEPT_BYTES` of each;
    the rest is read and dropped, so that it never blocks on a full pipe) until it exits and
    then what it left in them; None when it runs over ``timeout`` seconds. Once the child
    has exited, only what is already in the pipes is read: a process it left behind may
    keep them open."""
    kept = {pipe.fileno(): bytearray() for pipe in pipes}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for pipe in pipes:
            selector.register(pipe.fileno(), selectors.EVENT_READ)
        exited: float | None = None  # when the child was found to have exited
        while selector.get_map():
            now = time.monotonic()
            if exited is None and child.poll() is not None:
                exited = now
            if exited is None and now >= deadline:
                return None
            if exited is not None and now - exited > _DRAIN_SECONDS:
                break  # a process it left behind keeps writing: enough
            ready = selector.select(0 if exited is not None else min(deadline - now, _POLL_SECONDS))
            if exited is not None and not ready:
                break  # all it wrote is read; what holds the pipes now is not the program
            for key, _ in ready:
                data = os.read(int(key.fd), _READ_BYTES)
                if not data:
                    selector.unregister(key.fd)
                    continue
                buffer = kept[int(key.fd)]
                buffer += data[: max(0, _KEPT_BYTES - len(buffer))]
    if exited is None:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return None
    return [bytes(kept[pipe.fileno()]) for pipe in pipes]


class HealthLoop:
    """Runs ``check`` (the GPUs) and ``program`` (the nodes named ``hosts``) every
    ``interval`` seconds in a daemon thread (:meth:`start`), or one pass at a time
    (:meth:`run_once`, for tests)."""

    def __init__(
        self,
        db: Database,
        check: HealthCheck | None,
        *,
        program: HealthProgram | None = None,
        hosts: Sequence[str] = (),
        interval: float = DEFAULT_INTERVAL,
        drain: bool = False,
        opener: Callable[[], HealthCheck | None] | None = None,
    ):
        self.db = db
        self.check = check
        self._opener = opener
        """Makes a new check for a loop started again after :meth:`stop` closed its check
        (None: the loop checks the GPUs no more then)."""
        self._renew = False
        """Whether the next GPU pass opens a new check (:meth:`reopen`)."""
        self._handle_lock = threading.Lock()
        """Held while the check is swapped for a new one (:meth:`_renewed`) and while
        :meth:`stop` releases it: a check opened as the loop stops is closed too."""
        self.program = program
        self.hosts = tuple(hosts)
        self.drain = drain
        """Drain a faulty GPU (its jobs preempted by checkpoint), not only cordon it."""
        self._unwritten: list[GpuFault] = []
        """Faults read by a pass whose write failed."""
        self._gpu_lock = threading.Lock()
        """One GPU pass at a time: the loop's thread and the reconcile loop's blame."""
        self._last_gpu_pass: float | None = None
        """When the last GPU pass ended (``time.monotonic``)."""
        self._stopped = False
        """Whether :meth:`stop` released the check (a closed check checks no more; one
        still in use is closed as that use ends: :attr:`_closer`)."""
        self._closer = ClosedAfterUse(self._close_check, log, "the GPU health check")
        """Closes the check once no GPU pass uses it (:meth:`stop`)."""
        self._loop = PeriodicLoop(
            "danlu-health",
            interval,
            self.run_once,
            log,
            "health pass",
            "health passes work again",
        )

    def start(self) -> None:
        """Run passes in a daemon thread until :meth:`stop` (again after one: the check is
        kept if a stopped pass still used it, else the first GPU pass opens a new one with
        ``opener``: :meth:`reopen`)."""
        self.reopen()
        self._loop.start()

    def reopen(self) -> None:
        """Undo a :meth:`stop` (an app's lifespan run again): the check is kept if a
        stopped pass still uses it; a closed one is replaced by a new one from ``opener``
        at the next GPU pass. The check stayed closed before: every pass of a second
        lifespan failed on it, and a failed run's :meth:`blame` checked nothing."""
        with self._handle_lock:
            if self._closer.reopen():
                self._stopped = False
            elif self._opener is not None and self.check is not None:
                self._renew, self._stopped = True, False

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the thread after its current pass (waiting up to ``timeout`` seconds) and
        release the check: at once when no GPU pass uses it, else as that pass ends (a
        pass that outlived the timeout went on with the check closed under it)."""
        self._stopped = True  # no GPU pass for a blame from now
        stopped = self._loop.stop(timeout)
        with self._handle_lock:
            self._renew = False
            self._closer.release(stopped, timeout)

    def _renewed(self) -> None:
        """Open a new check if :meth:`reopen` asked for one (a GPU pass, under
        :attr:`_gpu_lock`, before it uses the check)."""
        with self._handle_lock:
            if not self._renew or self._opener is None:
                return
            self._renew = False
            check = self._opener()
            if check is None:
                log.warning("the GPU health check cannot be opened again; GPUs go unchecked")
                return
            self.check = check
            self._closer = ClosedAfterUse(check.close, log, "the GPU health check")

    def _close_check(self) -> None:
        if self.check is not None:
            self.check.close()

    def run_once(self, now: float | None = None) -> list[str]:
        """One pass at ``now`` (default: the clock); returns what it changed, a line each:
        ``NODE GPU N: reason`` for a GPU closed, ``NODE: closed: reason`` and ``NODE:
        reopened`` for a node the program closed or opened. The GPU check and the program
        run independently: when one fails, the other still runs, and the pass then raises
        the failure (what the other changed is logged)."""
        t = resolve_now(now)
        changed: list[str] = []
        failures: list[Exception] = []
        # the two halves are independent: NVML failing (the driver gone) is when the admin's
        # program matters most
        for half in (self._gpus, self._programs):
            try:
                changed += half(t)
            except Exception as exc:
                failures.append(exc)
        for line in changed:
            log.warning("health: %s", line)
        if failures:  # the loop logs a failed pass (the first failure; the rest logged here)
            for other in failures[1:]:
                log.warning("health pass: the other half failed too: %s", other)
            raise failures[0]
        return changed

    def blame(
        self, places: Collection[tuple[str, int]], since: float, now: float | None = None
    ) -> str | None:
        """Why a run on ``places`` (node name, GPU position) that started at ``since`` and
        has just failed may have failed for its GPUs (None: they look healthy): a GPU pass
        now (unless one ended under :data:`BLAME_PASS_SECONDS` ago), then the run's GPUs
        the health check closed since it started, e.g. ``GPU 1 on a (Xid 79 (GPU fell off
        the bus))``. A pass that fails (a busy store) is logged, and the closures written
        before it still count."""
        if self.check is None or not places:
            return None
        t = resolve_now(now)
        recent = self._last_gpu_pass
        # none once stopped: the check is closed (a run failing while the server shuts down)
        due = recent is None or time.monotonic() - recent >= BLAME_PASS_SECONDS
        if due and not self._stopped:
            try:
                for line in self._gpus(t, unless_closed=True):
                    log.warning("health: %s", line)
            except Exception:
                log.exception("health pass for a failed run")
        with self.db.read_session() as session:
            faulty = nodes.faulty_since(session, places, since)
        return "; ".join(faulty) or None

    def _gpus(self, t: float, *, unless_closed: bool = False) -> list[str]:
        """The GPU half of a pass; ``unless_closed``: none once the check is closed (a
        blame while the server stops), else the closed check raises."""
        if self.check is None:
            return []
        with self._gpu_lock:
            if not unless_closed or not self._stopped:
                self._renewed()
            return self._gpu_pass(t, unless_closed)

    def _gpu_pass(self, t: float, unless_closed: bool) -> list[str]:
        """:meth:`_gpus` once the check is open (its caller holding :attr:`_gpu_lock`)."""
        assert self.check is not None
        with self._closer.using() as usable:
            if unless_closed and not usable:
                return []
            try:
                # a fault the check finds every pass is kept once while the store fails
                # (the list grew by every pass's faults for as long as the outage lasted)
                faults = list(dict.fromkeys([*self._unwritten, *self.check.check()]))
                self._unwritten = faults
                if not faults:
                    return []
                rows = [(f.gpu[0], f.gpu[1], f.reason) for f in faults]
                with self.db.session() as session:
                    closed = nodes.close_faulty(session, rows, t, drain=self.drain)
                self._unwritten = []
                return closed
            finally:
                self._last_gpu_pass = time.monotonic()

    def _programs(self, t: float) -> list[str]:
        if self.program is None or not self.hosts:
            return []
        return self._program(self.program, t)

    def _program(self, program: HealthProgram, t: float) -> list[str]:
        result = program.run()  # no transaction open while it runs
        if result is None:
            return []
        mark = nodes.PROGRAM_REASON
        with self.db.session() as session:
            if result.passed:
                opened = nodes.reopen_marked(session, self.hosts, mark, t)
                return [f"{n}: reopened" for n in opened]
            reasons = dict.fromkeys(self.hosts, result.reason)
            closed = nodes.close_marked(session, reasons, mark, t)
        return [f"{n}: closed: {mark}{result.reason}" for n in closed]
