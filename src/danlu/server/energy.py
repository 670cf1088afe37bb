"""The energy meter loop: every ``interval`` seconds it reads how much energy each GPU used
and charges it to the jobs holding the GPUs (:mod:`danlu.server.services.energy`).

A pass reads the jobs holding GPUs (a read transaction), reads the meter with no transaction
open, then charges the interval's energy in one short write transaction. When that fails
(a busy store) nothing is lost: the next pass charges the energy since the last charged
reading. The meter is the control plane's own GPUs' (:func:`danlu.devices.energy.energy_meter`:
NVML, or the fake GPUs' synthetic draw); a Slurm or Ray cluster's GPUs are not metered.

Accuracy: a job is charged for an interval by the shares it holds at the interval's end,
for the part of the interval after its stretch began; the energy of the last partial
interval of a stretch that ended (at most ``interval`` seconds) is charged to nobody.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from danlu.devices.energy import EnergyMeter
from danlu.devices.inventory import GpuKey
from danlu.server.db import Database
from danlu.server.loops import ClosedAfterUse, PeriodicLoop, steady_clock
from danlu.server.services import energy
from danlu.server.services.common import resolve_now

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 10.0
"""Seconds between two readings of the meter (``DANLU_ENERGY_INTERVAL``)."""


class EnergyLoop:
    """Reads ``meter`` and charges jobs every ``interval`` seconds in a daemon thread
    (:meth:`start`), or one pass at a time (:meth:`run_once`, for tests). ``report``: called
    with each reading (the GPUs' energy since the meter's first reading, in joules), for
    the Prometheus counters."""

    def __init__(
        self,
        db: Database,
        meter: EnergyMeter,
        *,
        interval: float = DEFAULT_INTERVAL,
        report: Callable[[Mapping[GpuKey, float]], None] | None = None,
        opener: Callable[[], EnergyMeter | None] | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.db = db
        self.monotonic = monotonic
        """The clock the meter is read on (:meth:`run_once`); None:
        :func:`~danlu.server.loops.steady_clock` for a pass on the wall clock, the pass's
        ``now`` for one given it (a test's time)."""
        self.meter = meter
        self.report = report
        self._opener = opener
        """Makes a new meter for a loop started again after :meth:`stop` closed its meter
        (None: the loop reads no more then)."""
        self._charged: dict[GpuKey, float] | None = None
        """The reading up to which energy was charged (None before the first)."""
        self._charged_at = 0.0
        self._charged_clock: float | None = None
        """The meter's clock (:attr:`monotonic`) at the reading up to which energy was
        charged (None before the first)."""
        self._closer = ClosedAfterUse(meter.close, log, "the energy meter")
        """Closes the meter once no pass reads it (:meth:`stop`)."""
        self._handle_lock = threading.Lock()
        """Held while the meter is swapped for a new one (:meth:`_renewed`) and while
        :meth:`stop` releases it: a meter opened as the loop stops is closed too."""
        self._renew = False
        """Whether the next pass opens a new meter (:meth:`reopen`) if the old is closed."""
        self._loop = PeriodicLoop(
            "danlu-energy",
            interval,
            self.run_once,
            log,
            "energy pass",
            "energy passes work again",
        )

    def start(self) -> None:
        """Run passes in a daemon thread until :meth:`stop` (again after one: the meter is
        kept if a stopped pass still read it, else the first pass opens a new one with
        ``opener``: :meth:`reopen`)."""
        self.reopen()
        self._loop.start()

    def reopen(self) -> None:
        """Undo a :meth:`stop` (an app's lifespan run again): the meter is kept if a
        stopped pass still reads it; a closed one is replaced by a new one from ``opener``
        at the next pass (in the pass, so that no pass of the old meter charges after
        it), charging from that meter's first reading. The meter stayed closed before, and
        every pass of a second lifespan failed on it."""
        with self._handle_lock:
            self._renew = not self._closer.reopen() and self._opener is not None

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the thread after its current pass (waiting up to ``timeout`` seconds) and
        release the meter: at once when no pass reads it, else as that pass's reading
        ends (a pass that outlived the timeout read on with the meter closed under it)."""
        stopped = self._loop.stop(timeout)
        with self._handle_lock:
            self._renew = False
            self._closer.release(stopped, timeout)

    def _renewed(self) -> None:
        """Open a new meter if :meth:`reopen` asked for one (at the start of a pass)."""
        with self._handle_lock:
            if not self._renew or self._opener is None:
                return
            self._renew = False
            meter = self._opener()
            if meter is None:
                log.warning("the energy meter cannot be opened again; energy is not metered")
                return
            self.meter = meter
            self._closer = ClosedAfterUse(meter.close, log, "the energy meter")
            self._charged, self._charged_at = None, 0.0  # its readings start from 0
            self._charged_clock = None

    def run_once(self, now: float | None = None) -> int:
        """One pass at ``now`` (default: the clock); returns the jobs charged. The meter
        is read on a steady clock (:attr:`monotonic`): a meter without an energy counter
        integrates the GPUs' power over the time between readings, and a wall clock
        stepped a day ahead (an NTP step) charged the jobs a day of power; one set back
        counted nothing until it caught up."""
        t = resolve_now(now)
        self._renewed()
        clock = self.monotonic or (steady_clock if now is None else None)
        at = t if clock is None else clock()
        with self.db.read_session() as session:
            held = energy.holdings(session)
        with self._closer.using():  # not closed under the reading (:meth:`stop`)
            reading = self.meter.read(at, energy.busy(held))
        if self.report is not None:
            self.report(reading)
        last, since = self._charged, self._charged_at
        if last is None:  # the first reading: where charging starts
            self._charged, self._charged_at, self._charged_clock = reading, t, at
            return 0
        if clock is not None and self._charged_clock is not None:
            # the interval as long as the meter's clock says: a wall clock stepped since
            # (the reconcile loop moves the runs' starts by the step) shifts no share
            since = t - (at - self._charged_clock)
        used = {key: max(0.0, joules - last.get(key, 0.0)) for key, joules in reading.items()}
        charged = energy.charges(held, used, since, t)
        with self.db.session() as session:
            done = energy.charge(session, charged, t)
        self._charged, self._charged_at, self._charged_clock = reading, t, at
        return done
