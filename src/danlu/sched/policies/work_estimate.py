"""A job's total work, estimated online from what it reports: the goodput it trained at,
integrated over the time it trained, over the progress it made meanwhile.

Shared by the policies that predict remaining times from the jobs' own reports (``danlu``,
``optimus``). The units are the online model's goodput units
(:func:`danlu.sched.policies.danlu_model.observed_goodput`), so that ``(1 - progress) *
work / goodput(n)`` is the remaining time on ``n`` GPUs. The estimate lives in the job's
marks (the policy writes them back with its plan):

- ``danlu.u`` -- goodput units trained since the window opened (trapezoid between rounds,
  the restart after each (re)start left out);
- ``danlu.g`` / ``danlu.tg`` -- the goodput reported in the last round, and its time;
- ``danlu.pb`` -- the progress at which the window opened (0 for a job measured from its
  start);
- ``danlu.work`` -- the latest estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from danlu.sched.policies import danlu_model as dm
from danlu.sched.view import JobStatus

UNITS = "danlu.u"
"""Goodput units trained since the work window opened (estimated)."""
GOOD = "danlu.g"
"""The goodput the job reported in the last round."""
TG = "danlu.tg"
"""The time of that round."""
PB = "danlu.pb"
"""The progress at which the work window opened (0 for a job measured from its start)."""
WORK = "danlu.work"
"""The latest estimate of the job's total work."""


def estimate_work(
    job: JobStatus,
    marks: Mapping[str, float],
    now: float,
    restart_cost: float,
    update: dict[str, float],
) -> float | None:
    """Updated estimate of ``job``'s total work (goodput units), its window's marks and a new
    estimate (``WORK``) written into ``update``; the last estimate (``marks[WORK]``, or
    ``None`` before the first) while the job reports no step time or has made no progress in
    the window.

    ``restart_cost``: seconds after each (re)start during which the job trained nothing."""
    seen = job.observed
    work = marks.get(WORK)
    if seen.get("step_time") is None or job.last_start is None:
        return work
    trained_from = job.last_start + restart_cost
    good = dm.observed_goodput(seen)
    progress = seen.get("progress", 0.0)
    units, base = marks.get(UNITS), marks.get(PB)
    if units is None or base is None:  # the first measurement opens the window
        fresh = job.run_time <= 0 and job.preemptions == 0
        base = 0.0 if fresh else progress
        units = good * max(0.0, now - trained_from) if fresh else 0.0
        update[PB] = base
    else:
        last = marks.get(TG, -math.inf)
        if last >= trained_from:  # trained since the last round
            units += 0.5 * (marks.get(GOOD, good) + good) * (now - last)
        else:  # (re)started since: it trained from the end of its restart
            units += good * max(0.0, now - trained_from)
    update[UNITS], update[GOOD], update[TG] = units, good, now
    done = progress - base
    if units <= 0 or done <= 0:
        return work
    estimate = units / done  # a progress step of 1e-320 would make it infinite
    if not math.isfinite(estimate):
        return work
    if estimate != work:
        update[WORK] = estimate
    return estimate
