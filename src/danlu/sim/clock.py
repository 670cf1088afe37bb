"""The simulated clock's interval grid: the scheduling instants of
:class:`~danlu.sim.engine.Simulator`."""

from __future__ import annotations

import math

from danlu.core.errors import ConfigError
from danlu.sim.workload_fields import MOST_SECONDS


def tick_after(instant: float, interval: float) -> float:
    """The first tick of the interval grid (0, ``interval``, 2 ``interval``, ...) after
    ``instant``, which may itself be off the grid (an event round's or a failure's); always
    after ``instant``. :class:`ConfigError` when floats at ``instant`` are too far apart for
    a step of ``interval`` to reach a later one (the clock would stop there for ever); past
    :data:`~danlu.sim.workload_fields.MOST_SECONDS` it says the times are not seconds instead."""
    tick = (math.floor(instant / interval) + 1) * interval
    if tick > instant:
        return tick
    tick += interval  # the product rounded down onto the instant
    if tick > instant:
        return tick
    if instant > MOST_SECONDS:  # no interval helps: a workload's times are not seconds
        raise ConfigError(
            f"the simulated clock reached {instant:g} s, over 30,000 years, where times are "
            f"{math.ulp(instant):g} s apart and the --interval of {interval:g} s cannot "
            "advance it: the workload's times are not seconds (milliseconds or "
            "nanoseconds?); give its submission times and durations in seconds"
        )
    raise ConfigError(
        f"interval (--interval) {interval:g} s is too short to advance the simulated clock "
        f"at {instant:g} s (times there are {math.ulp(instant):g} s apart); use an interval "
        f"of at least {2 * math.ulp(instant):g} s"
    )
