"""The GPU health loop: every ``interval`` seconds it asks the health check which GPUs are
faulty (:mod:`danlu.devices.health`) and closes each one to new work.

A pass reads the health check with no transaction open, then cordons the faulty GPUs that
are still open in one short write transaction (:func:`~danlu.server.services.nodes.close_faulty`):
the scheduler puts nothing new on them, and the jobs there run on (a job on a lost GPU fails
and is restarted elsewhere, by its ``max_restarts``). An admin opens a GPU again with
``danlu uncordon NODE --gpu N`` once it is mended; a fault that lasts closes it again at the
next pass. When the write fails (a busy store), the faults read are kept and written by the
next pass: an Xid event is read only once.
"""

from __future__ import annotations

import logging

from danlu.devices.health import GpuFault, HealthCheck
from danlu.server.db import Database
from danlu.server.loops import PeriodicLoop
from danlu.server.services import nodes
from danlu.server.services.common import resolve_now

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 30.0
"""Seconds between two health checks (``DANLU_HEALTH_INTERVAL``)."""


class HealthLoop:
    """Runs ``check`` and closes the faulty GPUs every ``interval`` seconds in a daemon
    thread (:meth:`start`), or one pass at a time (:meth:`run_once`, for tests)."""

    def __init__(self, db: Database, check: HealthCheck, *, interval: float = DEFAULT_INTERVAL):
        self.db = db
        self.check = check
        self._unwritten: list[GpuFault] = []
        """Faults read by a pass whose write failed."""
        self._loop = PeriodicLoop(
            "danlu-health",
            interval,
            self.run_once,
            log,
            "GPU health check",
            "GPU health checks work again",
        )

    def start(self) -> None:
        """Run passes in a daemon thread until :meth:`stop`."""
        self._loop.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the thread after its current pass and release the check."""
        self._loop.stop(timeout)
        self.check.close()

    def run_once(self, now: float | None = None) -> list[str]:
        """One pass at ``now`` (default: the clock); returns the GPUs closed by it, as
        ``NODE GPU N: reason``."""
        t = resolve_now(now)
        faults = self._unwritten + self.check.check()
        self._unwritten = faults
        if not faults:
            return []
        rows = [(f.gpu[0], f.gpu[1], f.reason) for f in faults]
        with self.db.session() as session:
            closed = nodes.close_faulty(session, rows, t)
        self._unwritten = []
        for line in closed:
            log.warning("GPU closed to new work: %s", line)
        return closed
