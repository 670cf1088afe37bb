"""GPU counts for the ``danlu`` policy: a greedy over each job's value curve.

Every job offers a few *options* (a GPU count, the value of running with it, the batch size
that value assumes, and whether it keeps the job's current allocation). The allocator
maximises the total value under the cluster's GPU count: it starts every job at "nothing"
(or at a forced option) and repeatedly grants the increment with the best value per GPU,
from a job's current option to any larger one (the upper concave hull of its curve, so a
value curve with a bump -- a kept allocation that needs no restart -- is handled). A heap
with lazy re-evaluation keeps it O((jobs + grants) log jobs).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Option:
    """Run a job on ``gpus`` GPUs at global ``batch`` for ``value``; ``keep``: its current
    allocation and batch, no restart."""

    gpus: int
    value: float
    batch: int | None = None
    keep: bool = False


def _best_step(options: Sequence[Option], level: int, free: int) -> tuple[float, int] | None:
    """The best (value per GPU, option index) above ``level`` that fits in ``free`` GPUs."""
    cur_gpus = options[level].gpus if level >= 0 else 0
    cur_value = options[level].value if level >= 0 else 0.0
    best: tuple[float, int] | None = None
    for k in range(level + 1, len(options)):
        extra = options[k].gpus - cur_gpus
        if extra > free:
            break
        gain = options[k].value - cur_value
        if gain <= 0:
            continue
        slope = gain / extra if extra > 0 else float("inf")
        if best is None or slope > best[0]:
            best = (slope, k)
    return best


def allocate(
    options: Sequence[Sequence[Option]], capacity: int, forced: Sequence[int] | None = None
) -> list[int]:
    """The chosen option index per job (-1: none), GPUs within ``capacity``.

    ``options[j]`` must be sorted by GPU count. ``forced[j] >= 0`` pins job ``j`` to at
    least that option (granted first, in job order, while capacity lasts).
    """
    count = len(options)
    level = [-1] * count
    free = capacity
    if forced is not None:
        for j, k in enumerate(forced):
            if k >= 0 and options[j][k].gpus <= free:
                level[j] = k
                free -= options[j][k].gpus
    version = [0] * count
    heap: list[tuple[float, int, int, int]] = []

    def push(j: int) -> None:
        step = _best_step(options[j], level[j], free)
        if step is not None:
            heap.append((-step[0], j, step[1], version[j]))

    for j in range(count):
        push(j)
    heapq.heapify(heap)
    while heap and free > 0:
        _, j, k, ver = heapq.heappop(heap)
        if ver != version[j]:
            continue
        cur = options[j][level[j]].gpus if level[j] >= 0 else 0
        extra = options[j][k].gpus - cur
        if extra > free:
            version[j] += 1
            step = _best_step(options[j], level[j], free)
            if step is not None:
                heapq.heappush(heap, (-step[0], j, step[1], version[j]))
            continue
        free -= extra
        level[j] = k
        version[j] += 1
        step = _best_step(options[j], level[j], free)
        if step is not None:
            heapq.heappush(heap, (-step[0], j, step[1], version[j]))
    return level
