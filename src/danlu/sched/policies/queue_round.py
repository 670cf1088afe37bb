"""The queue round: pending jobs started in a policy's order while they fit.

:func:`queue_round` walks pending jobs in the policy's order and starts each one that fits
(``backfill``; with ``reserve``, only those that leave the first blocked job's reservation
alone) or stops at the first that does not (strict order). A job that could never start
(:class:`~.reservation.NeverFits`) says so in its reason. Nothing is preempted; a job that
fits only once the draining jobs exit waits for their GPUs, as in
:func:`~danlu.sched.policies.ranked_round.ranked_round`. ``fifo``, ``sjf`` and ``priority``
(its first pass, :func:`queue_pass`) are made of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from danlu.core.cluster import Allocation
from danlu.sched.placement.drain import DrainingFree
from danlu.sched.placement.gang import FreeMap
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies import reservation
from danlu.sched.policies.reservation import NeverFits, Reservation, Shape, shape_of
from danlu.sched.policies.waiting import NO_GPU_ASKED, asks_no_gpu, job_of_project
from danlu.sched.view import ClusterView, JobStatus, Plan, Start


def _first_asking(
    job: JobStatus, rest: Iterator[JobStatus], waiting: dict[str, str]
) -> JobStatus | None:
    """``job``, or the first job of ``rest`` after it, that asks for GPUs (None when none
    does); those passed over, asking for none, get their reason in ``waiting``."""
    head: JobStatus | None = job
    while head is not None and asks_no_gpu(head):
        waiting[head.id] = NO_GPU_ASKED
        head = next(rest, None)
    return head


def _first_possible(
    job: JobStatus, rest: Iterator[JobStatus], waiting: dict[str, str], never: NeverFits
) -> JobStatus | None:
    """:func:`_first_asking`, passing over too the jobs that ask for more than the cluster
    could ever give them (``never``): none of them could start whatever ends, so none holds
    the reservation (None when no job is left that could)."""
    head = _first_asking(job, rest, waiting)
    while head is not None and never(head.request):
        following = next(rest, None)
        head = None if following is None else _first_asking(following, rest, waiting)
    return head


def queue_round(
    view: ClusterView,
    order: Sequence[JobStatus],
    placement: str,
    backfill: bool,
    reserve: bool = False,
    *,
    memo: PackingMemo | None = None,
) -> Plan:
    """Start pending jobs in ``order`` while they fit; see the module docstring. ``reserve``
    (with ``backfill``): EASY backfill, the first job that does not fit gets a reservation
    that later starts must leave alone (:mod:`.reservation`). ``memo``: what the ``fgd``
    and ``danlu`` placements keep across rounds (the policy's own).

    The view's draining jobs (:attr:`ClusterView.draining`) count as gone once they exit,
    as in :func:`~.ranked_round.ranked_round`: a job that fits only on their GPUs is
    started there (it waits for them) and the part of them already free is held for it,
    not given to a job later in ``order`` (:class:`DrainingFree`)."""
    return queue_pass(view, order, placement, backfill, reserve, memo=memo)[0]


def queue_pass(
    view: ClusterView,
    order: Sequence[JobStatus],
    placement: str,
    backfill: bool,
    reserve: bool = False,
    *,
    memo: PackingMemo | None = None,
    reserve_when_full: bool = False,
) -> tuple[Plan, str | None]:
    """:func:`queue_round`'s plan, and the job that holds back the jobs after it: the first
    that does not fit under strict order (no ``backfill``), or the one holding a reservation;
    None when the round backfilled greedily (or every job fit). ``reserve_when_full``: when
    the GPUs run out before any job was left waiting, work out the reservation the first
    one left would get (nothing can start then, so the plan is the same; a caller that may
    preempt needs it), else only a reservation made earlier counts."""
    drain = DrainingFree(FreeMap(view, placement, memo), view)
    free = drain.now
    starts: list[Start] = []
    started: list[tuple[JobStatus, Allocation]] = []
    waiting: dict[str, str] = {}
    blocked_by: JobStatus | None = None
    held: Reservation | None = None
    reserved = False
    refused: set[Shape] = set()
    """Shapes of requests the reservation held back this round: the placement, deterministic,
    would put the next request of the shape where it put that one unless a start meanwhile
    took those GPUs, so the next ones wait without a try. A long queue behind a reservation
    then costs no placement per job; at worst a job that a later start's shift would have let
    in waits a round, and the reservation is never delayed."""
    never = NeverFits(view)
    """Requests the cluster could never hold: their jobs hold no reservation."""
    default = ""
    stopped: str | None = None
    """The first job left waiting when the GPUs ran out before any other was."""
    jobs = iter(order)
    for job in jobs:
        if blocked_by is not None or not drain.any_room():
            # Nothing else can start this round: one shared reason for the rest of the queue.
            default = (
                f"queued behind {job_of_project(blocked_by)} (strict order, no backfill)"
                if blocked_by is not None
                else "no free GPUs"
            )
            if blocked_by is None and (
                not backfill or (reserve and not reserved and reserve_when_full)
            ):
                if not backfill:
                    head = _first_asking(job, jobs, waiting)
                else:  # a job that could never start holds no reservation: see below
                    head = _first_possible(job, jobs, waiting, never)
                if head is None:
                    pass  # only jobs that could never start were left: they hold back no one
                elif not backfill:
                    stopped = head.id
                else:
                    later = free if drain.soon is None else drain.soon
                    found = reservation.reserve(
                        view, later, head, started, drained=later is not free
                    )
                    stopped = None if found is None else head.id
            break
        if asks_no_gpu(job):
            # it can never start: it waits, and under strict order holds back no one
            waiting[job.id] = NO_GPU_ASKED
            continue
        if held is not None and not held.may_admit(job, view.time, refused):
            waiting[job.id] = held.reason
            continue
        placed = drain.place_holding(job.request)
        if placed is not None and held is not None and not held.admits(job, placed[0], view.time):
            drain.unplace(*placed)
            refused.add(shape_of(job.request))
            waiting[job.id] = held.reason
            continue
        if placed is not None:
            starts.append(Start(job.id, placed[0]))
            if reserve:
                started.append((job, placed[0]))
            continue
        waiting[job.id] = never.why_not(free, job)
        if not backfill:
            blocked_by = job
        elif reserve and not reserved and not never(job.request):
            # The first job that could start once enough jobs end gets the reservation; one
            # that never could (more GPUs than the open cluster has, a GPU type none has)
            # would hold it in vain, and the round would backfill greedily behind it.
            reserved = True
            # the map once the draining jobs have exited, every start taken from it in full
            later = free if drain.soon is None else drain.soon
            held = reservation.reserve(view, later, job, started, drained=drain.soon is not None)
    plan = Plan(starts=tuple(starts), waiting=waiting, waiting_default=default, recheck_at=math.inf)
    if held is not None:
        return plan, held.job_id
    return plan, stopped if blocked_by is None else blocked_by.id
