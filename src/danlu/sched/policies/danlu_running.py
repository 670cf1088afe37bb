"""The ``danlu`` policy's preemptible running jobs as the round sees them: each one's entry
(its marks with the latest measurement remembered, its hold, a lone option while it has no
observations) and, as arrays over all of them, which are held this round, which may grow
and the key each one ranks by.

Plain functions over the policy's knobs (:class:`RunningKnobs`), so that
:mod:`danlu.sched.policies.danlu` stays the round's outline; a job with observations then
gets its options from the policy's model (``DanluPolicy._measured``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.danlu_alloc import Option
from danlu.sched.policies.danlu_entries import RunningEntry
from danlu.sched.policies.danlu_holds import over_budget, promoted_until, promotion_holds
from danlu.sched.policies.danlu_options import expected_seconds
from danlu.sched.policies.danlu_place import MOVES
from danlu.sched.view import JobStatus

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class RunningKnobs:
    """The ``DanluPolicy`` knobs that decide a running job's hold and rank (each one is
    documented on the policy)."""

    min_hold: float
    move_slack: float
    max_moves: int
    new_job_seconds: float
    starve_hold: float
    packed_sync: bool
    aging: float
    width: float
    rank_hysteresis: float
    move_budget: int
    grow_after: float


class RunningRanks(NamedTuple):
    """The round's arrays over the preemptible running jobs (one item per job, in order)."""

    keys: FloatArray
    """Rank keys: the remaining time (unmeasured jobs; measured ones are re-keyed from their
    options) times the width term, made shorter by ``rank_hysteresis``, over the aging
    weight."""
    weight: FloatArray
    """The aging weight: 1 plus the seconds waited (since submission, less the time run)
    over ``aging``."""
    since: FloatArray
    """Seconds since the last (re)start (``inf`` when unknown)."""
    held: BoolArray
    """Kept as it is this round: within its hold, held for good, within a starvation hold,
    or beyond the ``move_budget``."""
    may_grow: BoolArray
    """Held, past ``grow_after`` and a whole-GPU job: may grow into GPUs nobody takes."""
    promoted_gpus: tuple[int, int]
    """GPUs held within a starvation hold, in all and of jobs promoted within its last
    slice (:func:`~.danlu_holds.promotion_holds`)."""


def running_entry(job: JobStatus, now: float, gpn: int, knobs: RunningKnobs) -> RunningEntry:
    """A running job's round inputs that depend on its status object alone (the policy
    caches them per status object)."""
    marks: Mapping[str, float] = job.marks
    update = dm.remembered(marks, job.observed, gpn if knobs.packed_sync else 0)
    if update:
        marks = {**marks, **update}
    moves = marks.get(MOVES, 0.0)
    req = job.request
    shares, expected, gpus = req.shares_gpu, expected_seconds(req), job.allocation.num_gpus
    options = None
    if not job.observed:  # no model: one option, keeping it as it is
        left = knobs.new_job_seconds
        if expected is not None:
            left = max(expected - job.run_time_at(now), 1.0)
        options = [Option(gpus, left, None, True)]
    # positional (a named tuple's keywords cost a third more: 2,000 in a first round)
    return RunningEntry(
        job,  # status
        marks,
        update,
        knobs.min_hold * (1.0 + moves / knobs.move_slack),  # hold
        moves >= knobs.max_moves or shares,  # stuck
        shares,
        job.last_start if job.last_start is not None else math.inf,  # start
        options,
        req.submit_time,  # submit
        job.run_time,
        expected if expected is not None else math.nan,
        gpus,
        promoted_until(marks, knobs.starve_hold),
    )


def running_ranks(
    runs: Sequence[RunningEntry], now: float, total: int, knobs: RunningKnobs
) -> RunningRanks:
    """Holds, growth permissions and rank keys of the running jobs ``runs`` at ``now``, on a
    cluster of ``total`` GPUs (``C`` in the rank's width term)."""
    count = len(runs)

    def column(name: str, dtype: type) -> npt.NDArray[Any]:
        return np.fromiter(map(attrgetter(name), runs), dtype, count)

    start = column("start", float)
    ran = column("run_time", float) + np.maximum(0.0, now - start)  # run_time_at(now)
    weight = 1.0 + np.maximum(0.0, now - column("submit", float) - ran) / knobs.aging
    since = np.where(start == math.inf, math.inf, now - start)
    until = column("promoted_until", float)  # the starvation rule's holds
    held = (since < column("hold", float)) | column("stuck", bool) | (now < until)
    gpus = column("gpus", np.int64)
    promoted_gpus = promotion_holds(until, gpus, now, knobs.starve_hold)
    expected = column("expected", float)
    left = np.where(np.isnan(expected), knobs.new_job_seconds, np.maximum(expected - ran, 1.0))
    scale = max(total, 1)  # C in the rank: the cluster's GPUs
    # a running job ranks as if shorter
    keys = left * (1.0 + knobs.width * gpus / scale) * (1.0 - knobs.rank_hysteresis) / weight
    if knobs.move_budget:
        held |= over_budget(held, keys, knobs.move_budget)
    may_grow = held & (since >= knobs.grow_after) & ~column("shares", bool)
    return RunningRanks(keys, weight, since, held, may_grow, promoted_gpus)
