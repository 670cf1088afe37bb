"""``pollux``: a Pollux-like baseline (Qiao et al., OSDI'21), for comparisons in danlu's
simulator with the policy the ``danlu`` policy is measured against.

Every round it re-allocates every preemptible whole-GPU job, running or waiting, by the
search of :mod:`danlu.sched.policies.pollux_search`: the allocation (GPUs per node per job)
with the highest power mean (``fairness`` = -1) of the jobs' speed-ups. A job's speed-up on
``r`` GPUs is its goodput there, at its best batch, over its goodput at a fair share (the
cluster's GPUs divided by the jobs, on one node), from the same online model the ``danlu``
policy learns (:mod:`danlu.sched.policies.danlu_model`: measured step and sync times,
gradient statistics). What Pollux does and this policy does too:

- a job may get at most ``growth`` (2) times the most replicas it was measured at, so a new
  job starts on one GPU; a job not measured yet counts as scaling linearly;
- a job whose allocation changes has its speed-up multiplied by
  ``max(age - restarts * restart_cost, 0) / (age + restart_cost)``: young and often-moved
  jobs are not moved lightly (``restarts``: its re-allocations after the first start,
  counted in its marks as Pollux's simulator counts them, plus its restarts after a
  failure);
- at most one job spread over several nodes on any node;
- an adaptive job is (re)started at the batch its model finds best there, or, before any
  measurement, at ``max(init_batch, GPUs x min_local_bsz)``; it then adapts its batch itself;
- jobs are ordered by attained service (then submission): earlier ones keep their GPUs when
  the search has to cut.

Not Pollux's: a job gets GPUs only on the nodes whose GPU type and memory it accepts
(``gpu_types``, ``gpu_memory``); a rigid job (no batch limits) runs on exactly its requested
GPUs or waits; an adaptive job whose request names a range (``gpus: 2..8``) runs on at
least its minimum or gets nothing (a new one starts on its minimum; one whose batch limits,
GPU types or ``max_gpus`` allow fewer waits, or keeps what it runs on); requests for part
of a GPU are placed after the search, first come first served, on what is left
(``placement``). Non-preemptible and draining running jobs are left where they are. The
search is seeded per round (``seed`` and the round's time), so the policy is deterministic.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from danlu.core.cluster import Cluster
from danlu.sched.placement.gang import FreeMap
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies import pollux_search as ps
from danlu.sched.policies.base import nothing_to_size, place_shares_in_order, split_running
from danlu.sched.policies.options import INF, OptionRange, check_options
from danlu.sched.policies.waiting import NO_GPU_ASKED, asks_no_gpu, beyond_reach
from danlu.sched.view import ClusterView, JobStatus, Plan, Preempt, Resize, Start

MAX_SEARCH = 1000
"""Most individuals and generations of the genetic search (ten times the defaults)."""

NO_GPUS = "the allocation search gave it no GPUs this round"
SYNC_PRIOR = 0.0
"""Pollux's prior for a job not measured on several GPUs of one node yet: no sync time
(perfect scaling until measured)."""
INTER_PRIOR = 1.1
"""Pollux's prior for a job not measured across nodes yet: sync across nodes costs 1.1 x
the sync within one node."""
RESTARTS = "pollux.restarts"
"""How often the policy re-allocated the job after its first start (a resize, or a start
after it had run), as Pollux's simulator counts a job's restarts for its restart factor."""


@dataclass(frozen=True)
class _Known:
    """A job's model, the marks and limits it was built from (its key), and its speed-up
    tables by (most replicas, fair share, GPUs per node)."""

    key: object
    model: dm.JobModel | None
    tables: dict[tuple[int, int, int], ps.FloatArray]


def _speedups(model: dm.JobModel | None, most: int, fair: int, gpn: int) -> ps.FloatArray:
    """Goodput on 0..``most`` replicas, on one node (row 0) and spread over several (row
    1), over the goodput of ``fair`` replicas on one node; linear in the replicas (``r /
    fair``) for a job not measured yet (no model, or one that predicts nothing)."""
    table = np.zeros((2, most + 1))
    reference = model.best_batch(fair, gpn, nodes=1)[0] if model is not None else 0.0
    if model is not None and reference > 0:
        for r in range(1, most + 1):
            if r <= gpn:
                table[0, r] = model.best_batch(r, gpn, nodes=1)[0] / reference
            if r >= 2:
                table[1, r] = model.best_batch(r, gpn, nodes=2)[0] / reference
    if not table.any():
        table[:, 1:] = np.arange(1, most + 1) / fair
    return table


def _allowed_nodes(
    cluster: Cluster, jobs: list[JobStatus], base: ps.IntArray
) -> ps.BoolArray | None:
    """Per job (row) and node, whether the job may get GPUs there: a node whose GPUs are of
    a type it names (``gpu_types``) and have the memory it asks per GPU (``gpu_memory``),
    or one it runs on now; None when no job constrains its GPUs."""
    if not any(job.request.gpu_types or job.request.gpu_memory for job in jobs):
        return None
    allowed = base > 0
    masks: dict[tuple[frozenset[str], int], ps.BoolArray] = {}
    for row, job in enumerate(jobs):
        key = (job.request.gpu_types, job.request.gpu_memory)
        mask = masks.get(key)
        if mask is None:
            mask = masks[key] = fitting_nodes(cluster, *key)
        allowed[row] |= mask
    return allowed


def _with_reach_reasons(plan: Plan, jobs: list[JobStatus], reach: list[int]) -> Plan:
    """``plan`` with the reason of each waiting job that needs more GPUs than it may use
    (``reach``, per job) saying so, instead of :data:`NO_GPUS` (as if the search had chosen
    others over it)."""
    waiting = dict(plan.waiting)
    for job, may_use in zip(jobs, reach, strict=True):
        req = job.request
        least = req.gpus if req.max_gpus > 0 or not _adaptive(job) else 1
        if waiting.get(job.id) == NO_GPUS and least > may_use:
            waiting[job.id] = beyond_reach(least, int(may_use))
    return dataclasses.replace(plan, waiting=waiting)


def _adaptive(job: JobStatus) -> bool:
    """Whether the search may size ``job`` (its batch limits are measured); else it gets its
    request or nothing."""
    return all(job.observed.get(key, 0.0) > 0 for key in dm.LIMIT_KEYS)


def fitting_nodes(cluster: Cluster, gpu_types: frozenset[str], gpu_memory: int) -> ps.BoolArray:
    """Per node of ``cluster``, whether its GPUs are of a type in ``gpu_types`` (any, when
    empty) and have ``gpu_memory`` bytes each (any, when 0)."""
    mask = np.ones(len(cluster.nodes), dtype=bool)
    if gpu_types:
        wanted = {t.lower() for t in gpu_types}
        mask &= np.array([name in wanted for name in cluster.arrays.type_names], dtype=bool)
    if gpu_memory:
        mask &= np.array([node.gpu_type.memory >= gpu_memory for node in cluster.nodes], bool)
    return mask


@dataclass
class PolluxPolicy:
    """Pollux-like goodput allocation; see the module docstring. Options:

    - ``fairness``: exponent of the power mean of speed-ups (-1; 0: geometric mean; 1:
      plain sum, no fairness);
    - ``restart_cost``: seconds one restart costs a job (30), in its restart factor;
    - ``growth``: most replicas a job may get, as a multiple of the most it was measured at;
    - ``population``, ``generations``: size of the genetic search (100, 100; each at most
      ``MAX_SEARCH``, 1,000: ten times the default, so that a typo cannot make every round
      allocate gigabytes or run for minutes);
    - ``seed``: seed of the search;
    - ``placement``: strategy for requests of part of a GPU.
    """

    sizes_jobs: ClassVar[bool] = True
    """It chooses every adaptive job's GPU count (see :class:`~.base.Policy`)."""
    fairness: float = -1.0
    restart_cost: float = 30.0
    growth: float = 2.0
    population: int = 100
    generations: int = 100
    seed: int = 0
    placement: str = "best-fit"
    _packing: PackingMemo = field(
        default_factory=PackingMemo, init=False, repr=False, compare=False
    )
    """What the ``fgd`` and ``danlu`` placements keep across rounds (the typical pods, the
    packing scorer)."""
    name: str = "pollux"

    option_ranges: ClassVar[dict[str, OptionRange]] = {
        "fairness": (-INF, 1.0, (False, True)),
        "restart_cost": (0.0, INF, (True, False)),
        "growth": (1.0, INF, (True, False)),
        "population": (2, MAX_SEARCH, (True, True)),
        "generations": (0, MAX_SEARCH, (True, True)),
        "seed": (0, INF, (True, False)),
    }

    _memo: dict[str, _Known] = field(default_factory=dict, init=False, repr=False, compare=False)
    """What each job's measurements gave, until it measures something new."""

    def __post_init__(self) -> None:
        check_options(self, self.option_ranges)

    def schedule(self, view: ClusterView) -> Plan:
        if nothing_to_size(view):
            return Plan(recheck_at=math.inf)
        now = view.time
        cluster = view.cluster
        gpn = max((node.gpus for node in cluster.nodes), default=1)
        movable = split_running(view)[0]  # not the draining jobs: their GPUs are held
        waiting = [j for j in view.pending if not j.request.shares_gpu]
        shared = [j for j in view.pending if j.request.shares_gpu]
        jobs = sorted(
            [*movable, *waiting],
            key=lambda j: (j.attained_at(now), j.request.submit_time, j.request.seq),
        )
        new_marks: dict[str, dict[str, float]] = {}
        marks: list[Mapping[str, float]] = []
        for job in jobs:
            update = dm.remembered(job.marks, job.observed) if job.running else {}
            if update:
                new_marks[job.id] = update
            marks.append({**job.marks, **update} if update else job.marks)
        free = FreeMap(view, self.placement, self._packing)
        for job in movable:
            free.release(job.allocation)
        nodes = len(cluster.nodes)
        base = np.zeros((len(jobs), nodes), dtype=np.int64)
        for row, job in enumerate(jobs):
            for share in job.allocation.shares:
                base[row, share.node] += 1
        if len(self._memo) > 2 * len(jobs) + 64:  # forget jobs that left
            current = {job.id for job in jobs}
            self._memo = {k: v for k, v in self._memo.items() if k in current}
        models = [self._model(job, m) for job, m in zip(jobs, marks, strict=True)]
        allowed = _allowed_nodes(cluster, jobs, base)
        capacity = free.node_free.copy()
        # the GPUs each job may get: those of the nodes its GPU type and memory allow
        total = int(capacity.sum())
        reach = [total] * len(jobs) if allowed is None else (allowed @ capacity).tolist()
        problem = self._problem(jobs, marks, models, base, capacity, gpn, now, reach, allowed)
        # NumPy refuses a negative seed word: a clock before 0 (a view built in code) wraps
        rng = np.random.default_rng([self.seed, int(now * 1000) % 2**64])
        best = ps.search(problem, base[None], rng, self.population, self.generations)
        needs = problem.needs()
        plan = self._plan(view, jobs, models, base, best, needs, shared, new_marks, gpn)
        return _with_reach_reasons(plan, jobs, reach)

    # -- inputs ---------------------------------------------------------------------------
    def _model(self, job: JobStatus, marks: Mapping[str, float]) -> dm.JobModel | None:
        key = dm.model_key(marks, job.observed)
        hit = self._memo.get(job.id)
        if hit is not None and hit.key == key:
            return hit.model
        model = dm.build(marks, job.observed, sync_prior=SYNC_PRIOR, inter_prior=INTER_PRIOR)
        self._memo[job.id] = _Known(key, model, {})
        return model

    def _problem(
        self,
        jobs: list[JobStatus],
        marks: list[Mapping[str, float]],
        models: list[dm.JobModel | None],
        base: ps.IntArray,
        capacity: ps.IntArray,
        gpn: int,
        now: float,
        reach: list[int],
        allowed: ps.BoolArray | None = None,
    ) -> ps.SearchProblem:
        """The search's inputs; ``reach``: per job, the GPUs of ``capacity`` on the nodes it
        may use."""
        total = int(capacity.sum())
        count = len(jobs)
        fair = max(1, math.ceil(total / max(count, 1)))
        speedup = np.zeros((count, 2, total + 1))
        most = np.zeros(count, dtype=np.int64)
        gang = np.zeros(count, dtype=bool)
        least = np.ones(count, dtype=np.int64)
        factor = np.ones(count)
        for row, (job, mark, model) in enumerate(zip(jobs, marks, models, strict=True)):
            if not _adaptive(job):  # rigid: its request or nothing
                gang[row] = True
                if job.request.gpus <= reach[row]:
                    most[row] = job.request.gpus
                    speedup[row, :, most[row]] = most[row] / fair
            else:
                least[row], most[row] = self._range(job, mark, total, int(reach[row]))
                tables = self._memo[job.id].tables
                shape = (int(most[row]), fair, gpn)
                table = tables.get(shape)
                if table is None:
                    table = tables[shape] = _speedups(model, *shape)
                speedup[row, :, : table.shape[1]] = table
                speedup[row, :, : least[row]] = 0.0  # it does not run on fewer
            age = max(now - job.request.submit_time, 0.0)
            cost = self.restart_cost
            restarts = job.restarts + int(mark.get(RESTARTS, 0.0))  # failures and moves
            factor[row] = max(age - restarts * cost, 0.0) / (age + cost) if age + cost else 1
        # a fair share's worth of the cluster (one node's share of the GPUs) is speed-up 1
        speedup *= len(capacity) / max(total, 1)
        return ps.SearchProblem(
            speedup, most, capacity, base, factor, gang, self.fairness, allowed, least
        )

    def _range(
        self, job: JobStatus, mark: Mapping[str, float], total: int, reach: int
    ) -> tuple[int, int]:
        """The fewest and most GPUs of an adaptive job: from its minimum (a request naming a
        range, ``gpus..max_gpus``; else 1) to ``growth`` times the most it was measured on
        (but at least its minimum), within the GPUs it can reach, the most its batch limits
        fill and ``max_gpus``. When those allow fewer than its minimum it gets none (0, 0),
        or, running on at least its minimum, keeps its count (the search keeps or preempts
        it)."""
        req, seen = job.request, job.observed
        least = req.gpus if req.max_gpus > 0 else 1
        measured = int(mark.get(dm.MAXR, 0))
        cap = min(
            max(int(min(self.growth * measured, total)), least),
            reach,
            int(seen["max_batch"] // seen["min_local_bsz"]),
        )
        if req.max_gpus > 0:
            cap = min(cap, req.max_gpus)
        if cap >= least:
            return least, cap
        held = job.allocation.num_gpus if job.running else 0
        return (held, held) if held >= least else (0, 0)

    # -- output ---------------------------------------------------------------------------
    def _plan(
        self,
        view: ClusterView,
        jobs: list[JobStatus],
        models: list[dm.JobModel | None],
        base: ps.IntArray,
        best: ps.IntArray,
        needs: ps.IntArray,
        shared: list[JobStatus],
        new_marks: dict[str, dict[str, float]],
        gpn: int,
    ) -> Plan:
        free = FreeMap(view, self.placement, self._packing)
        # a last guard: no job starts or is resized below what it needs (the search's
        # repair already gives every job none or at least that)
        best = np.where((best.sum(axis=1) < needs)[:, None], 0, best)
        changed = [row for row in range(len(jobs)) if not np.array_equal(best[row], base[row])]
        for row in changed:
            if jobs[row].running:
                free.release(jobs[row].allocation)
        starts: list[Start] = []
        resizes: list[Resize] = []
        preempts: list[Preempt] = []
        waiting: dict[str, str] = {}
        for row in changed:
            job = jobs[row]
            counts = [(int(n), int(c)) for n, c in enumerate(best[row]) if c > 0]
            if not counts:
                if job.running:
                    preempts.append(Preempt(job.id, "the allocation search gave its GPUs away"))
                continue
            alloc = free.take_counts(counts)
            adaptive = bool(job.observed.get("adaptive"))
            batch = self._batch(job, models[row], alloc.num_gpus, len(counts), gpn)
            if job.running or job.run_time > 0 or job.preemptions:  # a restart
                note = new_marks.setdefault(job.id, {})
                note[RESTARTS] = job.marks.get(RESTARTS, 0.0) + 1
            if job.running:
                resizes.append(Resize(job.id, alloc, batch, adaptive))
            else:
                starts.append(Start(job.id, alloc, batch, adaptive))
        started = {s.job_id for s in starts}
        for job in jobs:
            if not job.running and job.id not in started:
                # a job asking for no GPU says so, as in every policy (not that the search
                # chose others over it)
                waiting[job.id] = NO_GPU_ASKED if asks_no_gpu(job) else NO_GPUS
        place_shares_in_order(free, shared, starts, waiting)
        return Plan(
            starts=tuple(starts),
            preempts=tuple(preempts),
            resizes=tuple(resizes),
            waiting=waiting,
            recheck_at=0.0,
            marks=new_marks,
        )

    @staticmethod
    def _batch(
        job: JobStatus, model: dm.JobModel | None, replicas: int, nodes: int, gpn: int
    ) -> int | None:
        """The global batch an adaptive job (re)starts at; ``None`` for other jobs (they
        keep their own)."""
        seen = job.observed
        if not seen.get("adaptive"):
            return None
        if model is not None:
            batch = model.best_batch(replicas, gpn, nodes=nodes)[1]
            if batch > 0:
                return batch
        first = max(seen["init_batch"], seen["min_local_bsz"] * replicas)
        return int(min(first, seen["max_batch"]))
