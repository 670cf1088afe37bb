"""``optimus``: an Optimus-like baseline (Peng et al., EuroSys'18) as the Pollux study ran it
(Optimus+TunedJobs: every job at the batch its user tuned), for comparisons in danlu's
simulator with a third published scheduler.

Every round it divides the GPUs anew among every preemptible whole-GPU job, running or
waiting, greedily by marginal gain:

1. in submission order, each job gets its least GPUs while they last: one for an elastic job
   (a request naming a range ``gpus..max_gpus``: ``gpus``), exactly its request for a rigid
   one (a job that reports no batch limits);
2. the GPUs left go one at a time to the elastic job whose predicted remaining time falls
   most with one GPU more, ``T(n) - T(n + 1)`` (Optimus's step-time gain times the remaining
   steps), up to ``batch // min_local_bsz`` GPUs (each GPU gets at least its smallest
   micro-batch) and the request's ``max_gpus``; an elastic job whose batch cannot fill its
   least GPUs that way is not shrunk below them: it keeps the GPUs it runs on, or waits,
   saying why;
3. a job whose GPU count is unchanged keeps its GPUs; the others, fewest GPUs first, are
   placed by ``placement`` (``worst-fit``: the nodes with the most idle GPUs first, as the
   study's Optimus placed them), and a running job whose count changed is moved (a resize,
   which costs it a restart) or preempted when it got none -- unless no start or resize
   took the GPUs it runs on: then it keeps them (a job given GPUs by count may still not
   fit where they are, and preempting the other would only idle them).

The split counts each job's least and most only within the GPUs it could get: those of the
GPU types and memory it asks for, on nodes open to new work, not held by jobs that stay
(non-preemptible, draining, sharing). A waiting job whose least is more than that gets none
and says why; it takes no GPUs from jobs it could never use them for.

``T(n) = (1 - progress) * work / goodput(n)``, with the goodput of the job's own batch on
``n`` GPUs packed on the fewest nodes, from the online model the ``danlu`` policy learns
(:mod:`danlu.sched.policies.danlu_model`, with the ``pollux`` baseline's optimistic priors for
links not measured yet), and the job's total work estimated from its reports
(:mod:`danlu.sched.policies.work_estimate`). A job not measured yet, or whose work is not
estimated yet, gains nothing from a GPU more: it keeps its least GPUs until it has run a
round. Jobs never change batch (``Start`` and ``Resize`` leave it to the job); nothing in the
gain counts the restart a move costs, so a job is moved whenever the greedy split changes,
as in the study (whose Optimus moved jobs every round it saw a gain). The plan is due again
at the next tick while it reads the clock (a running job's work estimate) or leaves marks;
otherwise only a change of jobs can change it (:func:`recheck_at`).

Not the study's: it ran Optimus with an oracle (the true step times and the true remaining
steps from the start); this policy learns both online, as a real deployment would. Requests
for part of a GPU are placed after the split, first come first served, on what is left
(``placement``); non-preemptible and draining running jobs stay where they are (their GPUs
are not split). Deterministic: no randomness, ties go to the earlier submission.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from danlu.sched.placement.gang import FreeMap
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.base import nothing_to_size, place_shares_in_order, split_running
from danlu.sched.policies.options import OptionRange, check_options
from danlu.sched.policies.pollux import INTER_PRIOR, SYNC_PRIOR, fitting_nodes
from danlu.sched.policies.waiting import NO_GPU_ASKED, asks_no_gpu, beyond_reach
from danlu.sched.policies.work_estimate import WORK, estimate_work
from danlu.sched.view import ClusterView, JobStatus, Plan, Preempt, Resize, Start

NO_GPUS = "the marginal-gain split gave it no GPUs this round"
NO_ROOM = "its share of GPUs did not fit on the idle GPUs of the nodes it may use"


@dataclass(frozen=True)
class SplitJob:
    """One job's inputs to the split: its least and most GPUs, and what predicts its
    remaining time on ``n`` GPUs (``model`` ``None`` or nothing ``left``: it gains nothing
    from more than its least)."""

    status: JobStatus
    least: int
    most: int
    model: dm.JobModel | None
    batch: int
    left: float
    """Remaining work, goodput units (0 when unknown)."""

    def seconds(self, gpus: int, gpus_per_node: int) -> float:
        """Predicted remaining seconds on ``gpus`` GPUs packed on the fewest nodes."""
        model = self.model
        if model is None or gpus <= 0:
            return math.inf
        split = dm.split_batch(gpus, self.batch, model.max_local, model.init_batch, model.max_batch)
        if split.atomic < model.min_local:
            return math.inf
        nodes = max(1, math.ceil(gpus / max(gpus_per_node, 1)))
        good = model.goodput(nodes, split)
        return self.left / good if good > 0 else math.inf

    def gain(self, gpus: int, gpus_per_node: int) -> float:
        """Seconds of remaining time one GPU more than ``gpus`` saves (0 when none or
        unknown)."""
        if gpus >= self.most or self.model is None or self.left <= 0:
            return 0.0
        now, more = self.seconds(gpus, gpus_per_node), self.seconds(gpus + 1, gpus_per_node)
        if not math.isfinite(more):
            return 0.0
        return now - more if math.isfinite(now) else math.inf


@dataclass
class OptimusPolicy:
    """Optimus-like marginal-gain allocation; see the module docstring. Options:

    - ``restart_cost``: seconds after each (re)start in which a job trains nothing (30; the
      work estimate leaves them out, the split does not count them);
    - ``placement``: the placement strategy (``worst-fit``).
    """

    sizes_jobs: ClassVar[bool] = True
    """It chooses every elastic job's GPU count (see :class:`~.base.Policy`)."""
    restart_cost: float = 30.0
    placement: str = "worst-fit"
    _packing: PackingMemo = field(
        default_factory=PackingMemo, init=False, repr=False, compare=False
    )
    """What the ``fgd`` and ``danlu`` placements keep across rounds (the typical pods, the
    packing scorer)."""
    name: str = "optimus"

    option_ranges: ClassVar[dict[str, OptionRange]] = {
        "restart_cost": (0.0, math.inf, (True, False)),
    }

    _memo: dict[str, tuple[object, dm.JobModel | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Each job's model and the key it was built from, until it measures something new."""

    def __post_init__(self) -> None:
        check_options(self, self.option_ranges)  # the placement's name too

    def schedule(self, view: ClusterView) -> Plan:
        if nothing_to_size(view):
            return Plan(recheck_at=math.inf)
        now = view.time
        gpn = max((node.gpus for node in view.cluster.nodes), default=1)
        movable = split_running(view)[0]  # not the draining jobs: their GPUs are held
        waiting = [j for j in view.pending if not j.request.shares_gpu]
        shared = [j for j in view.pending if j.request.shares_gpu]
        order = sorted([*movable, *waiting], key=lambda j: (j.request.submit_time, j.request.seq))
        new_marks: dict[str, dict[str, float]] = {}
        blocked: dict[str, str] = {}
        jobs = [self._job(job, now, new_marks, blocked) for job in order]
        if len(self._memo) > 2 * len(jobs) + 64:  # forget jobs that left
            current = {job.id for job in order}
            self._memo = {k: v for k, v in self._memo.items() if k in current}
        free = FreeMap(view, self.placement, self._packing)
        for job in movable:
            free.release(job.allocation)
        jobs = within_reach(free, jobs, blocked)
        counts = split_gpus(jobs, free.total_free, gpn)
        return self._plan(view, jobs, counts, shared, new_marks, blocked)

    # -- inputs ---------------------------------------------------------------------------
    def _job(
        self,
        job: JobStatus,
        now: float,
        new_marks: dict[str, dict[str, float]],
        blocked: dict[str, str],
    ) -> SplitJob:
        """The job's split inputs; the marks its measurements add go in ``new_marks``, and
        why it cannot start at all, if so, in ``blocked`` (it then gets no GPUs)."""
        req, seen = job.request, job.observed
        if asks_no_gpu(job) and not job.running:
            blocked[job.id] = NO_GPU_ASKED
            return SplitJob(job, 0, 0, None, 0, 0.0)
        marks: Mapping[str, float] = job.marks
        update = dm.remembered(marks, seen) if job.running else {}
        if update:
            marks = {**marks, **update}
        model = self._model(job, marks)
        if model is None:  # rigid, or not measured yet: as it runs, or its least to start
            elastic = all(seen.get(k, 0.0) > 0 for k in dm.LIMIT_KEYS)
            least = 1 if elastic and req.max_gpus <= 0 else req.gpus
            if job.running:
                least = job.allocation.num_gpus
            if update:
                new_marks[job.id] = update
            return SplitJob(job, least, least, None, 0, 0.0)
        batch = int(req.batch_size or seen.get("batch_size") or model.init_batch)
        most = max(1, batch // max(model.min_local, 1))
        least = 1
        if req.max_gpus > 0 and most < req.gpus:
            # Its batch cannot fill its minimum: it keeps the GPUs it runs on, or waits.
            if not job.running:
                blocked[job.id] = (
                    f"its batch of {batch} fills {most} GPUs at most with micro-batches of "
                    f"at least min_local_bsz ({model.min_local}), fewer than its minimum "
                    f"of {req.gpus} GPUs"
                )
            least = most = job.allocation.num_gpus if job.running else 0
        elif req.max_gpus > 0:
            least, most = req.gpus, min(most, req.max_gpus)
        if job.running:
            work = estimate_work(job, marks, now, self.restart_cost, update)
        else:
            work = marks.get(WORK)
        if update:
            new_marks[job.id] = update
        left = max(1.0 - seen.get("progress", 0.0), 0.0) * work if work is not None else 0.0
        return SplitJob(job, least, most, model, batch, left)

    def _model(self, job: JobStatus, marks: Mapping[str, float]) -> dm.JobModel | None:
        key = dm.model_key(marks, job.observed)
        hit = self._memo.get(job.id)
        if hit is not None and hit[0] == key:
            return hit[1]
        model = dm.build(marks, job.observed, sync_prior=SYNC_PRIOR, inter_prior=INTER_PRIOR)
        self._memo[job.id] = (key, model)
        return model

    # -- output ---------------------------------------------------------------------------
    def _plan(
        self,
        view: ClusterView,
        jobs: list[SplitJob],
        counts: list[int],
        shared: list[JobStatus],
        new_marks: dict[str, dict[str, float]],
        blocked: dict[str, str],
    ) -> Plan:
        free = FreeMap(view, self.placement, self._packing)
        moved = [
            row
            for row, (job, n) in enumerate(zip(jobs, counts, strict=True))
            if job.status.allocation.num_gpus != n or not job.status.running
        ]
        for row in moved:
            if jobs[row].status.running:
                free.release(jobs[row].status.allocation)
        starts: list[Start] = []
        resizes: list[Resize] = []
        waiting: dict[str, str] = {}
        unplaced: list[Preempt] = []  # running jobs given no GPUs or not placed anew
        for row in sorted(moved, key=lambda r: (counts[r], r)):
            status = jobs[row].status
            alloc = free.place(status.request, gpus=counts[row]) if counts[row] else None
            if alloc is None:
                reason = blocked.get(status.id, NO_GPUS) if counts[row] == 0 else NO_ROOM
                if status.running:
                    unplaced.append(Preempt(status.id, reason))
                else:
                    waiting[status.id] = reason
            elif status.running:
                resizes.append(Resize(status.id, alloc))
            else:
                starts.append(Start(status.id, alloc))
        # The split counts GPUs, not where they are: the job given a running one's GPUs
        # may not fit on them (a GPU type or memory they lack, another job given the same
        # nodes). A running job whose GPUs no start or resize took keeps them; preempting
        # it would only idle them, round after round.
        held = {job.status.id: job.status.allocation for job in jobs}
        preempts: list[Preempt] = []
        for preempt in unplaced:
            alloc = held[preempt.job_id]
            if free.can_take(alloc):
                free.take(alloc)
            else:
                preempts.append(preempt)
        place_shares_in_order(free, shared, starts, waiting)
        return Plan(
            starts=tuple(starts),
            preempts=tuple(preempts),
            resizes=tuple(resizes),
            waiting=waiting,
            recheck_at=recheck_at(jobs, new_marks),
            marks=new_marks,
        )


def recheck_at(jobs: list[SplitJob], new_marks: Mapping[str, Mapping[str, float]]) -> float:
    """When a round's plan may change with no job arriving, finishing or leaving: at the
    next tick (0) when it read the clock or leaves marks, else never by itself (infinite).

    The clock is read only by the work estimate of a running job with a model (the goodput
    it trained at, times the time since the last round: the split may change as it grows);
    every other input is the view's jobs, their requests, allocations, observations and
    marks, and the free GPUs. A running job's observations change between rounds only while
    it reports measurements (the simulator holds a round at every tick while such a job
    runs); marks the plan leaves are a change of the next round's view. With neither, the
    next round would make the same plan: while rigid jobs waited, a round at every tick was
    57,792 rounds for 40 openb pods on 2 x 8 GPUs (fifo: 92)."""
    if new_marks or any(job.model is not None and job.status.running for job in jobs):
        return 0.0
    return math.inf


def within_reach(free: FreeMap, jobs: list[SplitJob], blocked: dict[str, str]) -> list[SplitJob]:
    """``jobs`` with each one's least and most counted within the GPUs it could get on
    ``free`` (the round's free map, the movable jobs' GPUs released): the free whole GPUs
    of the nodes of the GPU types and memory it asks for, and of those it runs on now. A
    waiting job whose least is more gets none (why, in ``blocked``): the split would give
    it GPUs it cannot use, and take them from a job that can. A running job keeps its
    least (it can fall short only on GPUs closed since it started; it keeps those where
    it is while the split gives it its count)."""
    masks: dict[tuple[frozenset[str], int], npt.NDArray[np.bool_]] = {}
    out: list[SplitJob] = []
    everywhere = free.total_free  # what a job that names no GPU type or memory may use
    for job in jobs:
        req = job.status.request
        if job.most <= 0 or not (req.gpu_types or req.gpu_memory):
            # no GPUs to count, or every GPU is one it may use: the split gives a waiting
            # job whose least is more than they are none, and it says so (not that the
            # split chose others: a 4-GPU job with a node closed left 2 open)
            if everywhere < job.least and not job.status.running:
                blocked[job.status.id] = beyond_reach(job.least, everywhere)
            out.append(job)
            continue
        mask = masks.get((req.gpu_types, req.gpu_memory))
        if mask is None:
            mask = masks[req.gpu_types, req.gpu_memory] = fitting_nodes(
                free.cluster, req.gpu_types, req.gpu_memory
            )
        if job.status.running:
            mask = mask.copy()
            mask[[share.node for share in job.status.allocation.shares]] = True
        reach = int(free.node_free[mask].sum())
        if reach >= job.least:
            out.append(replace(job, most=min(job.most, reach)) if reach < job.most else job)
        elif job.status.running:
            out.append(job)
        else:
            blocked[job.status.id] = beyond_reach(job.least, reach)
            out.append(replace(job, least=0, most=0))
    return out


def split_gpus(jobs: list[SplitJob], gpus: int, gpus_per_node: int) -> list[int]:
    """Optimus's split of ``gpus`` among ``jobs`` (in submission order): each its least while
    they last (a job whose least no longer fits gets none, and later jobs still may), then
    one at a time to the job whose remaining time one GPU more cuts most (ties: the earlier
    job), while any gain is positive."""
    counts = [0] * len(jobs)
    left = gpus
    for row, job in enumerate(jobs):
        if 0 < job.least <= left:
            counts[row] = job.least
            left -= job.least
    heap = [
        (-gain, row)
        for row, job in enumerate(jobs)
        if counts[row] and (gain := job.gain(counts[row], gpus_per_node)) > 0
    ]
    heapq.heapify(heap)
    while left > 0 and heap:
        _, row = heapq.heappop(heap)
        counts[row] += 1
        left -= 1
        gain = jobs[row].gain(counts[row], gpus_per_node)
        if gain > 0:
            heapq.heappush(heap, (-gain, row))
    return counts
