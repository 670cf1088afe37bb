"""GPU counts for the ``danlu`` policy: heSRPT-style shares (``DanluPolicy.alloc = "shares"``).

An alternative to :func:`danlu_alloc.walk` with the same inputs and output. The jobs are
still walked in rank order (shortest first), each taking the option that minimises its cost
among those that fit the GPUs left; what differs is the cost of the GPUs it takes.

**Objective.** The sum of the completion times of the jobs in the walk, in a fluid model in
which every job runs at once on a share of the GPUs and the jobs complete in rank order
(heSRPT: Berg, Vesilo, Harchol-Balter). While the job ranked ``r`` runs (``T(n)`` seconds
on ``n`` of the ``G`` GPUs left at its turn), the ``B`` jobs ranked after it share the
other ``G - n``. If they scale as ``g**p`` in the GPUs ``g`` they get together (each keeps
its fraction of them), they progress at ``((G - n) / G)**p`` of the speed they would have
with all ``G``: each of them finishes ``T(n) * (1 - ((G - n) / G)**p)`` seconds later than
if the job had taken nothing. So the job's cost is

    ``T(n) * (1 + B * (1 - ((G - n) / G)**p))``

its own time plus the delay it causes the jobs behind it. For equal jobs with ``T(n) =
x / n**p`` its minimum is heSRPT's share of the shortest of ``B + 1`` jobs, ``1 - (B / (B +
1))**(1 / (1 - p))`` of ``G``, and as the jobs behind share what is left by the same rule,
the walk gives every job its heSRPT share (of the GPUs the options let it take).
:func:`danlu_alloc.walk` prices the GPUs linearly, ``T(n) * (1 + B * n / C)``, as if the
jobs behind scaled linearly: for small ``n`` that is ``1 / p`` times the price above, so it
gives the shortest job about ``p`` times its heSRPT share.

**Heterogeneous jobs.** Each job's exponent ``p`` is read off its own options (between its
smallest option and its fastest one, clipped to ``[P_MIN, P_MAX]``); the jobs behind are
taken together with the mean of their exponents. They cannot use more than the sum of their
fastest options' GPUs (``U``): GPUs beyond that cost them nothing, so the share is of
``min(G, U)``. The last job (nobody behind) takes its fastest option that fits.

Kept allocations, pins, growth permissions and the second pass over GPUs nobody took are as
in :func:`danlu_alloc.walk`. Deterministic; linear in the jobs times their options.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import compress
from operator import attrgetter, itemgetter

import numpy as np

from danlu.sched.policies.danlu_alloc import Option, grant_pinned, spare_pass

P_MIN = 0.05
"""Smallest speed-up exponent (a job that does not speed up at all)."""
P_MAX = 0.65
"""Default largest speed-up exponent. A job's options beyond the sizes it was measured at
come from an optimistic prior (unmeasured inter-node sync), so their curves overstate how
well the jobs behind scale; on the Pollux runs 0.65 beat 0.95, 0.8 and 0.5."""
P_SINGLE = 0.5
"""Exponent assumed for a job with a single option (nothing to read it from)."""

_SECONDS = attrgetter("seconds")
_GPUS = attrgetter("gpus")
_FIRST = itemgetter(0)


def profile(
    options: Sequence[Option], p_max: float = P_MAX, measured: bool = False
) -> tuple[float, int]:
    """The job's speed-up exponent ``p`` of ``T(n) ~ n**-p`` between its smallest option
    (the first: options come sorted by GPUs) and its fastest one, clipped to ``[P_MIN,
    p_max]`` (``P_SINGLE`` with one option), and the GPUs of its fastest option (more do
    not help it; 0 without options). ``measured``: the exponent is read off the options
    at sizes the job was measured at only (``Option.measured``; the GPUs returned are
    still those of its fastest option of all)."""
    if len(options) < 2:
        return min(P_SINGLE, p_max), (options[0].gpus if options else 0)
    small = options[0]
    fast = min(options, key=_SECONDS)
    if measured and not fast.measured:
        seen = [o for o in options if o.measured]
        if len(seen) < 2:
            return min(P_SINGLE, p_max), fast.gpus
        p, _ = profile(seen, p_max)
        return p, fast.gpus
    if fast.gpus <= small.gpus or not fast.seconds > 0 or not small.seconds > fast.seconds:
        return P_MIN, fast.gpus
    p = math.log(small.seconds / fast.seconds) / math.log(fast.gpus / small.gpus)
    return min(p_max, max(P_MIN, p)), fast.gpus


def delay(gpus: int, left: int, behind: float, p_rest: float, room: int) -> float:
    """The fraction of its own time by which a job taking ``gpus`` of the ``left`` GPUs
    delays the ``behind`` jobs after it, summed over them: ``behind * (1 - (g' / g)**p)``
    with ``g = min(left, room)`` and ``g' = min(left - gpus, room)`` (``room``: the GPUs the
    jobs behind can use at all)."""
    if behind <= 0:
        return 0.0
    base = min(left, room)
    if base <= 0:
        return 0.0
    rest = min(max(left - gpus, 0), room)
    return behind * (1.0 - math.pow(rest / base, p_rest))


def _choose(
    options: Sequence[Option],
    current: int,
    left: int,
    behind: float,
    p_rest: float,
    room: int,
    scale: float,
    hysteresis: float,
) -> int:
    """The option with at most ``left`` GPUs that minimises ``seconds * (1 + scale *
    delay(...))`` (a kept allocation's cost discounted by ``hysteresis``; -1: none); with
    ``current >= 0`` only that option or bigger ones."""
    base = min(left, room)
    weight = scale * behind if base > 0 else 0.0  # 0: nobody behind can use what it takes
    best, best_cost, floor = -1, math.inf, 0
    if current >= 0:
        floor = options[current].gpus + 1
    for k, option in enumerate(options):
        gpus = option.gpus
        if gpus > left or (gpus < floor and k != current):
            continue
        cost = option.seconds
        if weight:
            rest = min(max(left - gpus, 0), room)
            cost *= 1.0 + weight * (1.0 - math.pow(rest / base, p_rest))
        if option.keep:
            cost *= 1.0 - hysteresis
        if cost < best_cost:
            best, best_cost = k, cost
    return best


def share_walk(
    options: Sequence[Sequence[Option]],
    order: Sequence[int],
    capacity: int,
    pinned: Sequence[int] | None = None,
    hysteresis: float = 0.1,
    may_grow: Sequence[bool] | None = None,
    price_scale: float = 1.0,
    spare_gain: float = 0.0,
    p_max: float = P_MAX,
    measured: bool = False,
    explore: Sequence[bool] | None = None,
) -> list[int]:
    """The chosen option index per job (-1: none), GPUs within ``capacity``; the arguments
    are those of :func:`danlu_alloc.walk` (``price_scale`` multiplies the delay term);
    ``p_max`` caps the exponents read off the jobs' options; ``measured``: they are read
    off the sizes each job was measured at only (see :func:`profile`); ``explore`` as in
    :func:`danlu_alloc.spare_pass`."""
    chosen, locked, free = grant_pinned(options, capacity, pinned)
    n_after, p_after, room_after = _behind(
        options, order, chosen, locked, may_grow, min(P_SINGLE, p_max), p_max, measured
    )
    inf = math.inf
    for rank, j in enumerate(order):
        if free <= 0:
            break
        opts = options[j]
        if not opts:
            continue
        if locked[j]:
            if may_grow is None or not may_grow[j] or len(opts) == 1:
                continue  # held at its one option: nothing bigger to grow into
            held = opts[chosen[j]].gpus
            current = chosen[j]  # held: may grow in its turn, never shrinks
        else:
            if len(opts) == 1:  # _choose's answer for one option, without the call
                only = opts[0]
                if only.gpus <= free and only.seconds < inf:
                    chosen[j] = 0
                    free -= only.gpus
                continue
            held, current = 0, -1
        behind = n_after[rank + 1]
        p_rest = p_after[rank + 1] / behind if behind > 0 else 0.0
        room = room_after[rank + 1]
        left = free + held
        best = _choose(opts, current, left, behind, p_rest, room, price_scale, hysteresis)
        if best >= 0:
            chosen[j] = best
            free -= opts[best].gpus - held
    if free <= 0:
        return chosen
    return spare_pass(
        options, order, chosen, free, locked, may_grow, hysteresis, spare_gain, explore
    )


def _behind(
    options: Sequence[Sequence[Option]],
    order: Sequence[int],
    chosen: Sequence[int],
    locked: Sequence[bool],
    may_grow: Sequence[bool] | None,
    p_single: float,
    p_max: float,
    measured: bool,
) -> tuple[list[float], list[float], list[int]]:
    """What the jobs ranked at or after each position amount to (one more entry, 0, past
    the last rank): how many of them a job ahead would delay (a held job only by the share
    of its fastest size it does not hold yet, one that may not grow not at all), their
    exponents summed (so weighted) and the GPUs they could still use.

    Summed from the last rank up, one addition at a time (``cumsum`` over the reversed
    ranks: the same floating-point sums as a loop). A job with one option (most jobs at
    scale) is read as arrays: free, it counts 1, ``p_single`` and its GPUs; held, nothing.
    Only the others (none or several options) are looked at one by one."""
    count = len(options)
    sizes = np.fromiter(map(len, options), np.int64, count)
    room = np.zeros(count, np.int64)
    room[sizes > 0] = np.fromiter(
        map(_GPUS, map(_FIRST, compress(options, sizes.tolist()))), np.int64
    )
    p = np.full(count, p_single)
    weight = np.ones(count)
    held_alone = np.fromiter(locked, bool, count) & (sizes == 1)
    room[held_alone] = 0  # held at its one option: it can use no more GPUs, delays nobody
    weight[held_alone] = 0.0
    for j in np.flatnonzero(sizes != 1).tolist():
        opts = options[j]
        if len(opts) != 1:
            p[j], room[j] = profile(opts, p_max, measured)
        if locked[j]:
            held = opts[chosen[j]].gpus
            grows = may_grow is not None and may_grow[j]
            room[j] = max(int(room[j]) - held, 0) if grows else 0
            weight[j] = int(room[j]) / (int(room[j]) + held) if room[j] > 0 else 0.0
    ranked = np.asarray(order, np.int64)[::-1]  # the last rank first
    w = weight[ranked]
    n_after = np.cumsum(w)[::-1].tolist()
    p_after = np.cumsum(w * p[ranked])[::-1].tolist()
    room_after = np.cumsum(room[ranked])[::-1].tolist()
    n_after.append(0.0)
    p_after.append(0.0)
    room_after.append(0)
    return n_after, p_after, room_after
