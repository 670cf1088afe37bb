"""GPU counts for the ``danlu`` policy: an elastic shortest-remaining-time-first walk.

Every job offers a few *options*: a GPU count, the predicted remaining time with it (the
restart cost included when it is not the job's current allocation), the batch size that
prediction assumes, and whether it keeps the job's current allocation and batch.

The jobs are walked in rank order (shortest predicted remaining time first, divided by the
aging weight). Each job takes the option that minimises

    ``seconds * (1 + price * gpus)``,   ``price = jobs ranked after it / cluster GPUs``

among those that fit the GPUs left. The price is the JCT the GPUs cost the others: every
GPU-second a job holds delays each of the jobs queued behind it by about ``1 / capacity``
seconds, so a job with many jobs behind it stays at an efficient size and the last job (no
one behind it) may use everything it can speed up with. A kept allocation's cost is
discounted by ``hysteresis`` (changing it must pay for itself). A second pass gives GPUs
nobody took (price 0) to the jobs, in rank order, where they shorten them.

Linear in the jobs times their options; deterministic (ties by walk order). A job's option
times are only compared with each other: a job with a single option takes it when it fits,
whatever its time (the ``danlu`` policy relies on this to reuse such options across rounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Option(NamedTuple):
    """Run a job on ``gpus`` GPUs at global ``batch``; it then needs ``seconds`` more;
    ``keep``: its current allocation and batch, no restart; ``in_place``: its current
    allocation at another batch (a rebatch, no restart); ``measured``: ``gpus`` is no more
    than the replicas the job has been measured at (else its time rests on a prior).

    A named tuple: a first round at 1,000 nodes builds one for each of 10,000 queued jobs,
    where a frozen dataclass's construction cost 4x as much."""

    gpus: int
    seconds: float
    batch: int | None = None
    keep: bool = False
    in_place: bool = False
    measured: bool = True


def _cost(option: Option, price: float, hysteresis: float) -> float:
    cost = option.seconds * (1.0 + price * option.gpus)
    return cost * (1.0 - hysteresis) if option.keep else cost


def _pick(
    options: Sequence[Option], free: int, price: float, hysteresis: float, floor: int = 0
) -> int:
    """The index of the cheapest option with ``floor <= gpus <= free`` (-1: none)."""
    best, best_cost = -1, float("inf")
    for k, option in enumerate(options):
        if option.gpus > free or option.gpus < floor:
            continue
        cost = _cost(option, price, hysteresis)
        if cost < best_cost:
            best, best_cost = k, cost
    return best


def grant_pinned(
    options: Sequence[Sequence[Option]], capacity: int, pinned: Sequence[int] | None
) -> tuple[list[int], list[bool], int]:
    """The walks' start: every pinned option granted, in job order, while ``capacity``
    lasts. Returns the chosen option per job (-1: none yet), which jobs are pinned (locked)
    and the GPUs left."""
    chosen = [-1] * len(options)
    locked = [False] * len(options)
    free = capacity
    if pinned is not None:
        for j, k in enumerate(pinned):
            if k >= 0 and options[j][k].gpus <= free:
                chosen[j] = k
                free -= options[j][k].gpus
                locked[j] = True
    return chosen, locked, free


def walk(
    options: Sequence[Sequence[Option]],
    order: Sequence[int],
    capacity: int,
    pinned: Sequence[int] | None = None,
    hysteresis: float = 0.1,
    may_grow: Sequence[bool] | None = None,
    price_scale: float = 1.0,
    spare_gain: float = 0.0,
    explore: Sequence[bool] | None = None,
) -> list[int]:
    """The chosen option index per job (-1: none), GPUs within ``capacity``.

    ``order`` lists the jobs best-ranked first; ``pinned[j] >= 0`` reserves job ``j`` that
    option (granted before anyone else, in job order, while capacity lasts): it is never
    shrunk, and grows (in its rank turn or into GPUs nobody took) only when ``may_grow[j]``.
    ``explore[j]``: job ``j`` grows into GPUs nobody took without the ``hysteresis`` and
    ``spare_gain`` bars (see :func:`spare_pass`).
    """
    chosen, locked, free = grant_pinned(options, capacity, pinned)
    scale = max(capacity, 1)
    for rank, j in enumerate(order):
        if free <= 0:
            break  # nothing left to take or grow into (held jobs were granted up front)
        if not options[j]:
            continue
        price = price_scale * (len(order) - rank - 1) / scale
        if locked[j]:  # held: never shrunk, but may grow in its turn when allowed
            if may_grow is not None and may_grow[j]:
                held = options[j][chosen[j]].gpus
                k = _pick(options[j], free + held, price, hysteresis, floor=held + 1)
                current = _cost(options[j][chosen[j]], price, hysteresis)
                if k >= 0 and _cost(options[j][k], price, hysteresis) < current:
                    chosen[j] = k
                    free -= options[j][k].gpus - held
            continue
        k = _pick(options[j], free, price, hysteresis)
        if k >= 0:
            chosen[j] = k
            free -= options[j][k].gpus
    if free <= 0:
        return chosen
    return spare_pass(
        options, order, chosen, free, locked, may_grow, hysteresis, spare_gain, explore
    )


def spare_pass(
    options: Sequence[Sequence[Option]],
    order: Sequence[int],
    chosen: list[int],
    free: int,
    locked: Sequence[bool],
    may_grow: Sequence[bool] | None,
    hysteresis: float,
    spare_gain: float,
    explore: Sequence[bool] | None = None,
) -> list[int]:
    """Give ``free`` GPUs nobody took to the jobs they shorten, best-ranked first (price 0);
    a job that already has GPUs grows only for a gain of ``spare_gain`` more than
    ``hysteresis`` asks. A job with ``explore[j]`` (the caller's exploration move: it was
    measured at no size above its current one, and nothing waits) grows for any gain over
    keeping, undiscounted, its restart counted in the option's time: the prior at a size
    it never ran cannot beat the keep discount by itself. Updates and returns
    ``chosen``."""
    for j in order:
        if not options[j] or free <= 0:
            continue
        if locked[j] and (may_grow is None or not may_grow[j]):
            continue
        k = chosen[j]
        if k >= 0 and len(options[j]) == 1:
            continue  # at its one option already
        held = options[j][k].gpus if k >= 0 else 0
        better = _pick(options[j], free + held, 0.0, hysteresis, floor=held + 1)
        if better < 0:
            continue
        bar, gain = hysteresis, spare_gain
        if explore is not None and explore[j]:
            bar, gain = 0.0, 0.0
        current = _cost(options[j][k], 0.0, bar) if k >= 0 else float("inf")
        if k >= 0:  # a job that has GPUs grows into spare ones only for a clear gain
            current *= 1.0 - gain
        if _cost(options[j][better], 0.0, hysteresis) < current:
            chosen[j] = better
            free -= options[j][better].gpus - held
    return chosen
