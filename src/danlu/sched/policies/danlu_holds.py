"""Which jobs the danlu policy keeps where they are this round, and which waiting jobs it
starts first: the starvation rule's promotions and holds, and the move budget.

Plain functions over the round's arrays and entries, so the rules are tested on their own
and :mod:`danlu.sched.policies.danlu` stays the round's outline."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from danlu.sched.policies.danlu_alloc import Option, grant_pinned
from danlu.sched.policies.danlu_entries import WaitingEntry
from danlu.sched.policies.danlu_place import PROMOTED

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

STARVE_SLICES = 10
"""The starvation rule promotes its share of the cluster in this many slices of
``starve_hold``: at most a tenth of ``starve_share`` is started within any tenth of the
hold, so that the holds of a backlog's promoted jobs end spread out, not all together."""

_STARVING_FROM = attrgetter("starving_from")
_WAIT_SEQ = attrgetter("seq")


@dataclass(frozen=True)
class StarveRule:
    """The starvation rule's knobs (``DanluPolicy.starve_after``, ``starve_share``,
    ``starve_hold``)."""

    after: float
    """Seconds of waiting (since submission or the last preemption) that make a job starve."""
    share: float
    """Share of the capacity the jobs within a starvation hold take at most."""
    hold: float
    """Seconds a promoted job is neither shrunk nor preempted (0: the ordinary hold)."""


def promoted_until(marks: Mapping[str, float], hold: float) -> float:
    """When the hold the starvation rule gave a job (its :data:`PROMOTED` mark) ends
    (``-inf``: it was never promoted)."""
    return marks.get(PROMOTED, -math.inf) + hold


def promotion_holds(
    promoted_until: FloatArray, gpus: npt.NDArray[np.int64], now: float, hold: float
) -> tuple[int, int]:
    """The GPUs of the jobs (``promoted_until``: the end of each one's starvation hold of
    ``hold`` seconds) still within it, and of those promoted within the hold's last
    :data:`STARVE_SLICES`-th."""
    within = now < promoted_until
    lately = promoted_until > now + hold * (1.0 - 1.0 / STARVE_SLICES)
    return int(gpus[within].sum()), int(gpus[lately].sum())


def starving_jobs(
    rule: StarveRule,
    waits: list[WaitingEntry],
    now: float,
    first: int,
    capacity: int,
    held: int,
    lately: int,
) -> list[int]:
    """The starving jobs promoted this round, as indices ``first`` + position in ``waits``:
    of the pending jobs that waited ``rule.after`` seconds and can run, the longest-waiting
    (ties by submission order) whose smallest sizes sum to at most ``rule.share`` of the
    capacity less the ``held`` GPUs of jobs promoted before and still within their hold,
    and to at most a :data:`STARVE_SLICES`-th of it less the ``lately`` GPUs of those
    promoted within the last such slice of the hold (so the holds end spread out, not in
    waves). At least the first: always when ``held`` is 0, and when ``lately`` is 0 if it
    fits the first bound."""
    since = np.fromiter(map(_STARVING_FROM, waits), float, len(waits))
    late = np.flatnonzero(now - since >= rule.after)
    if not late.size:
        return []
    seqs = np.fromiter(map(_WAIT_SEQ, map(waits.__getitem__, late.tolist())), np.int64, late.size)
    share = rule.share * capacity
    overall = budget = share - held
    if rule.hold > 0:
        budget = min(overall, share / STARVE_SLICES - lately)
    promoted: list[int] = []
    used = 0
    for i in late[np.lexsort((seqs, since[late]))].tolist():
        opts = waits[i].options
        if not opts:
            continue
        size = opts[0].gpus
        alone = not promoted and (not held or (not lately and size <= overall))
        if not alone and used + size > budget:
            break  # strictly in turn: nobody overtakes a longer-starving job
        promoted.append(first + i)
        used += size
    return promoted


def starving_reserve(
    options: Sequence[Sequence[Option]],
    starving: Sequence[int],
    capacity: int,
    pinned: Sequence[int],
) -> int:
    """The GPUs to keep free this round for a promoted job (``starving``, in turn, each at
    its first option) that does not fit yet: the GPUs left after the held jobs
    (``pinned``) and the promoted jobs before it. Jobs in their hold cannot be moved for
    it, so without this the GPUs that free up one by one would go to lower-ranked jobs
    again and again, and a job wider than what any round frees at once would starve for
    good. 0 when every promoted job fits."""
    free = grant_pinned(options, capacity, pinned)[2]
    for j in starving:
        need = options[j][0].gpus if options[j] else 0
        if need > free:
            return max(free, 0)
        free -= need
    return 0


def over_budget(held: BoolArray, keys: FloatArray, budget: int) -> BoolArray:
    """The running jobs past their hold (``~held``) to hold for the round beyond the
    ``budget`` left open to a move: all but the ``budget`` ranked last (the largest
    ``keys``, the likeliest to give up GPUs; ties to the later index)."""
    open_jobs = np.flatnonzero(~held)
    extra = np.zeros_like(held)
    if len(open_jobs) > budget:
        ranked = open_jobs[np.lexsort((open_jobs, keys[open_jobs]))]
        extra[ranked[: len(open_jobs) - budget]] = True
    return extra
