"""EASY backfill: a reservation for the first job of the queue that cannot start.

With greedy backfill a queue's small jobs start in every gap and a wide job can wait for
ever, since the GPUs never free up all at once. EASY backfill (Lifka's, the one Slurm's
backfill plugin grew from) gives the first job that cannot start a *reservation*: the
earliest time the running jobs' expected ends free room for it, and the GPUs it would get
then. A later job may still start now when it does not delay that reservation: when its own
expected end comes before it, or when the GPUs it is placed on are still free at that time
after the reserved job is placed.

Expected ends come from each job's ``expected_duration`` (the spec's
``training.expected_duration``, else its ``time_limit``; a trace's duration in the
simulator): ``last start + expected duration - time run before``, at the earliest now. A
running job without one is taken to run for ever (its GPUs are never counted free); a job
draining out of the cluster ends now. When the reserved job cannot fit even after every job
with a known end is gone, no reservation is made and the round backfills greedily.

A job that could not be placed even on the cluster's open GPUs with no job on them (more
GPUs than they have, a GPU type or memory size none has: :class:`NeverFits`) can never
start, so it holds no reservation: the next job that cannot start gets it. Before, such a
job took the round's one reservation and, finding no room, left the round to backfill
greedily, so every wide job behind it waited for ever behind a stream of small ones.

Everything is computed with :class:`~danlu.sched.placement.gang.FreeMap` copies, so the
reservation honours the policy's placement, GPU types, multi-node gangs and GPU sharing as
the real start will.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from danlu.core.cluster import Allocation
from danlu.sched.placement.gang import FreeMap
from danlu.sched.policies.waiting import (
    asks_no_gpu,
    job_of_project,
    never_starts,
    why_not,
)
from danlu.sched.view import ClusterView, JobRequest, JobStatus

Shape = tuple[int, int, int, frozenset[str]]
"""What placement looks at in a request: GPUs, milli-GPU, memory per GPU, GPU types."""


def shape_of(request: JobRequest) -> Shape:
    """The request's :data:`Shape`."""
    return (request.gpus, request.gpu_milli, request.gpu_memory, request.gpu_types)


FULL_TRIES = 16
"""Placement tries of the reserved job after every released job, before they thin out."""


def expected_end(job: JobStatus, now: float, draining: frozenset[str]) -> float:
    """When a running job is expected to end (``inf`` when it has no expected duration)."""
    if job.id in draining:
        return now
    duration = job.request.expected_duration
    if duration is None:
        return math.inf
    return max(now, now + duration - job.run_time_at(now))


def end_if_started(job: JobStatus, now: float) -> float:
    """When a pending job started ``now`` is expected to end (``inf`` without an expected
    duration): its duration less the time its earlier runs took."""
    duration = job.request.expected_duration
    return math.inf if duration is None else now + max(0.0, duration - job.run_time)


class NeverFits:
    """Which requests could never be placed on a view's cluster: not on its GPUs open to
    new work (closed nodes and GPUs stay closed) with no job on them. Such a job waits for
    ever whatever ends, so it may hold no reservation. Built once per round, its empty map
    made on first use, its answers kept by request :data:`Shape`."""

    def __init__(self, view: ClusterView) -> None:
        self._view = view
        self._empty: FreeMap | None = None
        self._known: dict[Shape, bool] = {}
        self._open_count: int | None = None

    def why_not(self, free: FreeMap, job: JobStatus) -> str:
        """Why ``job`` could not be placed on ``free`` (:func:`~.waiting.why_not`), saying so
        when it never could be (:func:`~.waiting.never_starts`)."""
        reason = why_not(free, job)
        req = job.request
        if asks_no_gpu(job):
            return reason
        if req.gpu_types or req.gpu_memory or req.shares_gpu:
            never = self(req)
        else:  # whole GPUs of any kind: more than the open GPUs (no empty map to build)
            never = req.gpus > self._open_gpus()
        return never_starts(reason) if never else reason

    def _open_gpus(self) -> int:
        """The GPUs of the view's cluster open to new work."""
        if self._open_count is None:
            opened = self._view.open_gpus()
            total = self._view.cluster.total_gpus
            self._open_count = total if opened is None else int(opened.sum())
        return self._open_count

    def __call__(self, request: JobRequest) -> bool:
        """Whether ``request`` could not be placed even on the empty open cluster."""
        shape = shape_of(request)
        known = self._known.get(shape)
        if known is None:
            empty = self._empty
            if empty is None:
                view = self._view
                bare = ClusterView(
                    view.time,
                    view.cluster,
                    closed_nodes=view.closed_nodes,
                    closed_gpus=view.closed_gpus,
                )
                empty = self._empty = FreeMap(bare)  # feasibility only: any strategy will do
            alloc = empty.place(request)
            known = alloc is None
            if alloc is not None:
                empty.release(alloc)
            self._known[shape] = known
        return known


@dataclass
class Reservation:
    """The reserved job, when it is to start (``at``) and the capacity left at that time once
    it is placed (``later``: the free map then). Built by :func:`reserve`."""

    job_id: str
    at: float
    later: FreeMap
    reason: str

    def ends_before(self, job: JobStatus, now: float) -> bool:
        """Whether ``job``, started now, is expected to end by the reserved time."""
        return end_if_started(job, now) <= self.at

    def may_admit(self, job: JobStatus, now: float, refused: set[Shape]) -> bool:
        """A cheap necessary condition of :meth:`admits`, checked before placing ``job``: it
        ends in time, or it could fit in what the reservation leaves and no request of its
        shape was ``refused`` this round. A long queue behind a reservation then costs no
        placement per job."""
        if self.ends_before(job, now):
            return True
        return shape_of(job.request) not in refused and self.later.could_fit_now(job.request)

    def admits(self, job: JobStatus, alloc: Allocation, now: float) -> bool:
        """Whether starting ``job`` on ``alloc`` now leaves the reservation as it is: the job
        is expected to end by then, or ``alloc`` is still free then (and is taken there)."""
        if self.ends_before(job, now):
            return True
        if self.later.can_take(alloc):
            self.later.take(alloc)
            return True
        return False


def reserve(
    view: ClusterView,
    free: FreeMap,
    head: JobStatus,
    started: Sequence[tuple[JobStatus, Allocation]],
    *,
    drained: bool = False,
) -> Reservation | None:
    """The reservation of ``head`` (the first job that cannot start now), given the free map
    after this round's starts (``started``, which end as any running job); None when no known
    end frees room for it. ``drained``: ``free`` counts the view's draining jobs gone already
    (:attr:`~danlu.sched.placement.drain.DrainingFree.soon`: starts may wait for their
    GPUs), so their GPUs are not released again."""
    now = view.time
    draining = view.draining
    ends = [
        (expected_end(job, now, draining), index, job.allocation)
        for index, job in enumerate(view.running)
        if not (drained and job.id in draining)
    ]
    offset = len(view.running)
    ends += [
        (end, offset + index, alloc)
        for index, (job, alloc) in enumerate(started)
        if math.isfinite(end := end_if_started(job, now))
    ]
    ends.sort(key=lambda item: (item[0], item[1]))
    later = free.copy()
    failed = 0
    next_try = 0
    pending: float | None = None  # the end of a job released since the last try, if any
    for released, (end, _, alloc) in enumerate(ends, start=1):
        if not math.isfinite(end):
            break
        later.release(alloc)
        if released < next_try:
            pending = end
            continue
        if not later.could_fit_now(head.request):
            continue
        pending = None
        found = _reservation(later, head, end, now)
        if found is not None:
            return found
        # Room only grows as jobs end: after a few misses (a GPU type, a gang's shape), try
        # again each time the jobs released have doubled, and once more after the last, so
        # a round makes at most logarithmically many tries past the first ones; the
        # reservation may then come somewhat later than the earliest possible.
        failed += 1
        if failed >= FULL_TRIES:
            next_try = 2 * released
    if pending is not None and later.could_fit_now(head.request):
        return _reservation(later, head, pending, now)
    return None


def _reservation(later: FreeMap, head: JobStatus, end: float, now: float) -> Reservation | None:
    """``head`` reserved at ``end`` on the room ``later`` leaves (left unchanged), if any."""
    trial = later.copy()
    if trial.place(head.request) is None:
        return None
    wait = f"{end - now:.0f}s" if end > now else "now"
    reason = f"backfill holds GPUs for {job_of_project(head)} (reserved to start in {wait})"
    return Reservation(head.id, end, trial, reason)
