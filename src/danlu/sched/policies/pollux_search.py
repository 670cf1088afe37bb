"""The allocation search of the ``pollux`` baseline policy: a genetic search over
replicas-per-node matrices that maximises a power mean of the jobs' speed-ups.

After Pollux (Qiao et al., OSDI'21, section 4.2): a cluster allocation is a matrix ``A``
(jobs x nodes) of GPU counts. Its value is the power mean, with exponent ``p`` (``-1``: a
fair mean that punishes any job left with nothing), of every job's speed-up ``S_j(A_j)`` over
its fair share, each multiplied by a restart factor when its row differs from the current
allocation. Constraints: a node's GPUs, a job's most replicas, at most one job spread over
several nodes on any node (two distributed jobs would fight over the node's network),
all-or-nothing for rigid jobs, and none or at least its least replicas for an elastic job
(the minimum of a ``gpus: 2..8`` request: its model does not fit on fewer).

The search is a plain function of value types (:class:`SearchProblem` in, a matrix out) and
of a seeded generator: the same problem and seed give the same matrix. Its operators follow
the paper's description (crossover of whole job rows, mutations that reset a job to its
current allocation, clear some of its nodes or add replicas where there is room, and a
repair that makes every candidate valid; not the paper's: a job left with fewer replicas
than it needs, a gang's or its least, is topped up where there is room before the repair,
which would otherwise drop it); the selection keeps the best of parents and
children (elitist), breaking ties by the population's order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

EPSILON = 1e-3
"""Added to every speed-up before the power mean, so a job left without GPUs counts as a
very small speed-up instead of making a negative-exponent mean undefined."""


@dataclass(frozen=True)
class SearchProblem:
    """One round's inputs, jobs in priority order (earlier rows keep their GPUs when the
    repair has to cut: lowest attained service first).

    ``speedup[j, m, r]``: job ``j``'s speed-up on ``r`` replicas, on one node (``m`` = 0) or
    spread over several (``m`` = 1); ``speedup[j, :, 0]`` is 0. ``max_replicas[j]``: the
    most GPUs job ``j`` may get. ``capacity[n]``: GPUs of node ``n`` to hand out. ``base``:
    the current allocation (jobs x nodes). ``restart_factor[j]``: factor on job ``j``'s
    speed-up when its row changes (a restart). ``gang[j]``: job ``j`` runs on exactly
    ``max_replicas[j]`` GPUs or none. ``fairness``: the power mean's exponent ``p``
    (0: geometric mean). ``allowed[j, n]``: whether job ``j`` may get GPUs on node ``n``
    (its GPU type and memory; None: every job on every node). ``min_replicas[j]``: the
    fewest GPUs job ``j`` runs on, or it gets none (None: one for every job).
    """

    speedup: FloatArray
    max_replicas: IntArray
    capacity: IntArray
    base: IntArray
    restart_factor: FloatArray
    gang: BoolArray
    fairness: float = -1.0
    allowed: BoolArray | None = None
    min_replicas: IntArray | None = None

    @property
    def jobs(self) -> int:
        return int(self.base.shape[0])

    @property
    def nodes(self) -> int:
        return int(self.base.shape[1])

    def needs(self) -> IntArray:
        """The fewest GPUs each job runs on when it gets any: a gang's most replicas, else
        its least (at least 1)."""
        least = np.ones(self.jobs, dtype=np.int64)
        if self.min_replicas is not None:
            least = np.maximum(least, self.min_replicas)
        return np.asarray(np.where(self.gang, self.max_replicas, least), dtype=np.int64)


def values(problem: SearchProblem, states: IntArray) -> FloatArray:
    """The power mean of the scaled speed-ups of each candidate in ``states`` (P x J x N)."""
    replicas = states.sum(axis=2)
    spread = (np.count_nonzero(states, axis=2) > 1).astype(np.int64)
    jobs = np.arange(problem.jobs)[None, :]
    limit = problem.speedup.shape[2] - 1
    speedups = problem.speedup[jobs, spread, np.minimum(replicas, limit)]
    changed = (states != problem.base[None]).any(axis=2)
    speedups = speedups * np.where(changed, problem.restart_factor[None, :], 1.0)
    shifted = speedups + EPSILON
    p = problem.fairness
    if p == 0:
        return np.asarray(np.exp(np.log(shifted).mean(axis=1)), dtype=np.float64)
    if DIRECT_POWERS[0] <= p and abs(p) >= DIRECT_POWERS[1]:
        return np.asarray(np.mean(shifted**p, axis=1) ** (1.0 / p), dtype=np.float64)
    return np.asarray(np.exp(_log_power_mean(shifted, p)), dtype=np.float64)


DIRECT_POWERS = (-100.0, 1e-6)
"""The exponents ``p`` (at least the first, at least the second in size) whose power mean
:func:`values` takes as ``mean(s**p) ** (1/p)``. Below -100, ``EPSILON ** p`` (a job with
no GPUs) overflows to inf and every candidate that leaves a job out is worth 0: at -1000
the search started no waiting job on idle GPUs. Near 0, ``s**p`` rounds to 1 and the mean
raised to ``1/p`` is noise (at 1e-300 every candidate was worth 1, and nothing started).
Those exponents go through :func:`_log_power_mean`."""


def _log_power_mean(shifted: FloatArray, p: float) -> FloatArray:
    """The logarithm of each row's power mean with exponent ``p`` (not 0), worked out in
    log space: ``log M = (x_max + log1p(mean(expm1(x - x_max)))) / p`` with ``x = p log
    s``, which neither overflows for ``p`` far below 0 (where it tends to the row's least)
    nor loses the differences for ``p`` near 0 (where it tends to the geometric mean).
    ``p`` below -1e300 counts as -1e300 (``p log s`` stays finite; the mean is the least
    by then)."""
    p = max(p, -1e300)
    x = p * np.log(shifted)
    top = x.max(axis=1, keepdims=True)
    spread = np.log1p(np.expm1(x - top).mean(axis=1))
    out: FloatArray = (top[:, 0] + spread) / p
    return out


def repair(problem: SearchProblem, states: IntArray, rng: np.random.Generator) -> IntArray:
    """Make every candidate valid, in place and returned: each job within its most replicas
    (replicas dropped from randomly ordered nodes), only on the nodes it is allowed, one
    distributed job per node (the earliest row keeps it), node capacities (earliest rows
    first), gangs whole and every job on none or at least its least replicas."""
    pop, _, nodes = states.shape
    if problem.allowed is not None:
        states[:, ~problem.allowed] = 0
    # most replicas: keep a running total over the nodes in a random order per candidate
    order = np.argsort(rng.random((pop, 1, nodes)), axis=2)
    order = np.broadcast_to(order, states.shape)
    shuffled = np.take_along_axis(states, order, axis=2)
    capped = np.minimum(np.cumsum(shuffled, axis=2), problem.max_replicas[None, :, None])
    shuffled = np.diff(capped, axis=2, prepend=0)
    np.put_along_axis(states, order, shuffled, axis=2)
    # one distributed job per node: the first distributed row on a node keeps it
    spread = np.count_nonzero(states, axis=2) > 1
    on_node = (states > 0) & spread[:, :, None]
    states[(np.cumsum(on_node, axis=1) > 1) & on_node] = 0
    # node capacity: earlier rows first
    filled = np.minimum(np.cumsum(states, axis=1), problem.capacity[None, None, :])
    states[:] = np.diff(filled, axis=1, prepend=0)
    # gangs all or nothing, every other job none or at least its least
    needs = problem.needs()
    if (needs > 1).any():
        states[states.sum(axis=2) < needs[None, :]] = 0
    return states


def _mutate(problem: SearchProblem, states: IntArray, rng: np.random.Generator) -> IntArray:
    pop, jobs, nodes = states.shape
    # a job back to its current allocation
    reset = rng.random((pop, jobs)) < 0.1
    states = np.where(reset[:, :, None], problem.base[None], states)
    # some of a job's nodes cleared
    clear = (rng.random((pop, jobs)) < 0.1)[:, :, None] & (rng.random(states.shape) < 0.1)
    states = np.where(clear, 0, states)
    # replicas added on nodes with room: each (job, node) with probability 1 / nodes
    used = states.sum(axis=1, keepdims=True)
    room = np.maximum(problem.capacity[None, None, :] - used, 0)
    if problem.allowed is not None:
        room = np.where(problem.allowed[None], room, 0)
    grow = (rng.random(states.shape) < 1.0 / nodes) & (room > 0)
    extra = np.floor(rng.random(states.shape) * (room + 1)).astype(np.int64)
    return _top_up(problem, np.where(grow, states + extra, states))


def _top_up(problem: SearchProblem, states: IntArray) -> IntArray:
    """Every job that has some replicas but fewer than it needs (:meth:`SearchProblem.needs`)
    given the missing ones on the nodes with the most room first (room left by the
    candidate's other jobs may be claimed twice: the repair settles that). Without it the
    repair would drop such a job, and a job that needs several GPUs could get them only
    from mutations that happen to add them all at once. Draws nothing from the generator."""
    needs = problem.needs()
    totals = states.sum(axis=2)
    short = np.where((totals > 0) & (totals < needs[None, :]), needs[None, :] - totals, 0)
    if not short.any():
        return states
    room = np.maximum(problem.capacity[None, None, :] - states.sum(axis=1, keepdims=True), 0)
    room = np.broadcast_to(room, states.shape)
    if problem.allowed is not None:
        room = np.where(problem.allowed[None], room, 0)
    order = np.argsort(-room, axis=2, kind="stable")
    ranked = np.take_along_axis(room, order, axis=2)
    before = np.cumsum(ranked, axis=2) - ranked
    add = np.clip(short[:, :, None] - before, 0, ranked)
    extra = np.zeros_like(states)
    np.put_along_axis(extra, order, add, axis=2)
    return states + extra


def _crossover(
    first: IntArray, second: IntArray, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """Single-point crossover over the job rows of each pair of parents."""
    pairs, jobs, _ = first.shape
    cut = rng.integers(0, jobs + 1, size=(pairs, 1))
    take_first = (np.arange(jobs)[None, :] < cut)[:, :, None]
    return np.where(take_first, first, second), np.where(take_first, second, first)


def nothing_to_give(problem: SearchProblem) -> bool:
    """Whether every candidate the search could hold is the empty allocation: no job may get
    a replica (``max_replicas`` all 0) on nodes whose capacities are not negative. The
    repair then clears every candidate (the seeds' and every generation's), so the search
    would return zeros whatever the generator draws; without this it ran its generations
    anyway (a stuck simulation asks the policy about each waiting job alone: a job the
    policy cannot size cost a whole search each time)."""
    return not problem.max_replicas.any() and bool((problem.capacity >= 0).all())


def search(
    problem: SearchProblem,
    seeds: IntArray,
    rng: np.random.Generator,
    population: int = 100,
    generations: int = 100,
) -> IntArray:
    """The best allocation (J x N) found by a genetic search started from ``seeds``
    (K x J x N candidate allocations, repaired first; the current allocation should be
    among them), with ``population`` candidates over ``generations`` generations."""
    if problem.jobs == 0 or problem.nodes == 0:  # nothing to search (no node: no GPUs)
        return problem.base.copy()
    if nothing_to_give(problem):
        return np.zeros_like(problem.base)
    start = np.repeat(seeds, -(-population // len(seeds)), axis=0)[:population].copy()
    states = repair(problem, start, rng)
    scores = values(problem, states)
    for _ in range(generations):
        # binary tournaments pick the parents
        contenders = rng.integers(0, population, size=(population, 2))
        better = np.where(
            scores[contenders[:, 0]] >= scores[contenders[:, 1]],
            contenders[:, 0],
            contenders[:, 1],
        )
        half = population // 2
        kids_a, kids_b = _crossover(states[better[:half]], states[better[half : 2 * half]], rng)
        children = _mutate(problem, np.concatenate((kids_a, kids_b)), rng)
        children = repair(problem, children, rng)
        merged = np.concatenate((states, children))
        merged_scores = np.concatenate((scores, values(problem, children)))
        keep = np.argsort(-merged_scores, kind="stable")[:population]
        states, scores = merged[keep], merged_scores[keep]
    return np.asarray(states[0], dtype=np.int64)
