"""The ranked round: the best-ranked jobs that fit are kept or started, the rest preempted.

:func:`ranked_round` takes running and pending jobs in the policy's rank order (each list
kept across rounds by the policy, see :mod:`.ranked`); the best ones that fit the cluster's
capacity are kept or started, and preemptible running jobs that fall outside are preempted,
unless their GPUs are still free once the admitted jobs are placed. A job the GPUs so freed
do not suit (GPU type, memory, fragmentation) may preempt lower-ranked jobs on GPUs it can
use instead, when that lets it start. ``tiresias``, ``value-density`` and ``priority`` (its
preemption pass) are made of it.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from operator import attrgetter, itemgetter
from typing import Any

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster
from danlu.sched.placement.drain import DrainingFree
from danlu.sched.placement.gang import FreeMap
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies.ranked import RankKey
from danlu.sched.policies.reservation import NeverFits, Shape, shape_of
from danlu.sched.policies.waiting import asks_no_gpu, job_of_project
from danlu.sched.share_size import least_share_milli
from danlu.sched.view import (
    BoolArray,
    ClusterView,
    JobRequest,
    JobStatus,
    Plan,
    Preempt,
    Start,
)

_LISTED_REASONS = 100
"""Jobs left waiting beyond this many (in rank order) share one reason: a round stays
proportional to the jobs it can act on, not to the length of the queue."""


def _reasons(free: FreeMap, left: list[JobStatus], total: int, view: ClusterView) -> dict[str, Any]:
    never = NeverFits(view)  # a job that could never start says so
    waiting = {j.id: never.why_not(free, j) for j in left[:_LISTED_REASONS]}
    default = "waiting for GPUs to free up" if total > _LISTED_REASONS else ""
    return {"waiting": waiting, "waiting_default": default}


_PREEMPTIBLE = attrgetter("request.preemptible")
_DEMAND = attrgetter("demand_milli")

RankedLists = tuple[Sequence[RankKey], Sequence[JobStatus]]
"""Keys ascending and the jobs they rank, in the same order."""


def ranked_round(
    view: ClusterView,
    pending_keys: Sequence[RankKey],
    pending_jobs: Sequence[JobStatus],
    running: Callable[[], RankedLists],
    placement: str,
    mark_preempted: Callable[[JobStatus], dict[str, float]] | None = None,
    *,
    memo: PackingMemo | None = None,
) -> Plan:
    """Keep or start the best-ranked jobs that fit; preempt the rest.

    ``pending_keys``/``pending_jobs``: the view's pending jobs in rank order (lowest key
    first); ``running()``: the same for the view's running jobs, called only when a
    preemption is possible. Keys must be unique across both lists.

    Non-preemptible running jobs are always kept. The capacity budget is counted in
    milli-GPU; a job that would be admitted by the budget but cannot be placed on what the
    rank order frees (fragmentation, GPU type, memory) preempts no job for that, but may
    preempt preemptible jobs ranked below it on GPUs it can use, the lowest-ranked first,
    when that lets it start (:func:`_preempt_where_it_fits`); else it waits.
    ``mark_preempted(job)`` gives the marks to keep for each preempted job
    (:attr:`Plan.marks`). ``memo``: as for :func:`~.queue_round.queue_round`.

    The view's draining jobs (:attr:`ClusterView.draining`) count as gone: never victims,
    they take no capacity budget, and a job that fits only on their GPUs is started there
    (it waits for them) and the part of them already free is held for it, not given to a
    job ranked lower (:class:`DrainingFree`).
    """
    # Fast path: place pending jobs in rank order on the free GPUs, skipping those that do not
    # fit. If every job fits, or no preemptible running job ranks below a job left waiting,
    # nobody can be preempted and this is the whole answer (gangs may span nodes, so a job
    # fits by GPU count exactly when it can be placed).
    if not pending_jobs:
        return Plan(recheck_at=math.inf)
    initial = FreeMap(view, placement, memo)
    drain = DrainingFree(initial.copy(), view)
    free = drain.now
    quick: list[Start] = []
    left: list[JobStatus] = []
    left_total = 0
    best_waiting: RankKey | None = None
    for position, job in enumerate(pending_jobs):
        if not drain.any_room():
            # Nothing else can fit: the rest waits.
            if best_waiting is None:
                best_waiting = pending_keys[position]
            room = _LISTED_REASONS + 1 - len(left)
            if room > 0:
                left.extend(pending_jobs[position : position + room])
            left_total += len(pending_jobs) - position
            break
        alloc = drain.place(job.request)
        if alloc is not None:
            quick.append(Start(job.id, alloc))
            continue
        if best_waiting is None and not asks_no_gpu(job):
            best_waiting = pending_keys[position]  # no preemption makes room for no GPU
        if len(left) <= _LISTED_REASONS:
            left.append(job)
        left_total += 1
    if best_waiting is None:
        if left:  # only jobs asking for no GPU wait
            return Plan(
                starts=tuple(quick), recheck_at=math.inf, **_reasons(free, left, left_total, view)
            )
        return Plan(starts=tuple(quick), recheck_at=math.inf)
    running_keys, running_jobs = running()
    lowest = next(
        (
            key
            for key, job in zip(reversed(running_keys), reversed(running_jobs), strict=True)
            if job.request.preemptible and job.id not in view.draining
        ),
        None,
    )
    if lowest is None or not lowest > best_waiting:
        return Plan(starts=tuple(quick), **_reasons(free, left, left_total, view))
    return _preempting_round(
        initial,
        view,
        pending_keys,
        pending_jobs,
        running_keys,
        running_jobs,
        mark_preempted,
    )


_ADMISSION_TRIES = 4
"""How many times :func:`_preempting_round` admits again without the admitted jobs that
could not be placed; after the last try those hold their budget and wait (the victim check
still keeps every victim they would have displaced)."""


def _preempting_round(
    initial: FreeMap,
    view: ClusterView,
    pending_keys: Sequence[RankKey],
    pending_jobs: Sequence[JobStatus],
    running_keys: Sequence[RankKey],
    running_jobs: Sequence[JobStatus],
    mark_preempted: Callable[[JobStatus], dict[str, float]] | None,
) -> Plan:
    """The slow path of :func:`ranked_round`: admit by rank within capacity, then place
    (``initial``: the round's free map before anything was placed; it is left as it is).

    Jobs are admitted in rank order while their demand fits the capacity left. Running jobs
    are taken in bulk between two pending ones (prefix sums of their demand and a bisection
    find how many fit), so the walk costs a step per pending job it reaches, not per job.

    An admitted job that cannot be placed (GPU type, memory, fragmentation) gives its budget
    back: admission runs again without it (up to :data:`_ADMISSION_TRIES` times), so the
    running jobs the rank order would displace for it stay. It may then preempt jobs ranked
    below it on GPUs it can use (:func:`_preempt_where_it_fits`). Whatever the placement
    does, a running job is preempted only when a job ranked above it starts on its GPUs; a
    job ranked below it that would take them waits.
    """
    # a job asking for no GPU is never placed: it takes no budget from the start
    unplaceable = {job.id for job in pending_jobs if asks_no_gpu(job)}
    stuck: dict[str, tuple[RankKey, JobStatus]] = {}
    """The admitted jobs left unplaced in any attempt (the others in ``unplaceable`` ask
    for no GPU)."""
    for attempt in range(_ADMISSION_TRIES):
        drain = DrainingFree(initial.copy(), view)
        admission = _admit(
            drain, pending_keys, pending_jobs, running_keys, running_jobs, unplaceable
        )
        admitted, victims, waiting, default = admission
        # Release every running job that fell below the line, then place the admitted
        # pending jobs in rank order.
        for _, victim in victims:
            drain.release(victim.allocation)
        starts: list[tuple[RankKey, Start]] = []
        unplaced: list[JobStatus] = []
        for key, job in admitted:
            alloc = drain.place(job.request)
            if alloc is None:
                unplaced.append(job)
                stuck[job.id] = (key, job)
            else:
                starts.append((key, Start(job.id, alloc)))
        if not unplaced or attempt == _ADMISSION_TRIES - 1:
            break
        unplaceable.update(job.id for job in unplaced)
    if stuck:
        targeted = _preempt_where_it_fits(
            drain,
            view,
            sorted(stuck.values(), key=itemgetter(0)),
            running_keys,
            running_jobs,
            victims,
        )
        if targeted:
            placed_now = {start.job_id for _, start in targeted}
            unplaced = [job for job in unplaced if job.id not in placed_now]
            unplaceable -= placed_now
            starts = sorted([*starts, *targeted], key=itemgetter(0))
    free = drain.now
    # A victim whose GPUs are all still free keeps running: preempting it would only idle
    # GPUs.
    displaced: list[tuple[RankKey, JobStatus]] = []
    for key, victim in victims:
        if free.can_take(victim.allocation):
            drain.take(victim.allocation)
        else:
            displaced.append((key, victim))
    kept_starts, displaced = _only_for_higher_ranked(starts, displaced, waiting)
    preempts: list[Preempt] = []
    marks: dict[str, dict[str, float]] = {}
    for _, victim in displaced:
        preempts.append(Preempt(victim.id, "outranked by waiting jobs"))
        if mark_preempted is not None:
            marks[victim.id] = mark_preempted(victim)
    never = NeverFits(view)  # a job that could never start says so
    for job in unplaced:
        waiting[job.id] = never.why_not(free, job)
    for job in pending_jobs:
        if job.id in unplaceable and job.id not in waiting:
            waiting[job.id] = never.why_not(free, job)
    if unplaced:  # jobs admitted but not placed hold capacity they cannot use
        kept_starts += _start_on_idle(initial, view, pending_jobs, kept_starts, displaced, waiting)
    return Plan(
        starts=tuple(kept_starts),
        preempts=tuple(preempts),
        waiting=waiting,
        waiting_default=default,
        marks=marks,
    )


def _start_on_idle(
    initial: FreeMap,
    view: ClusterView,
    pending_jobs: Sequence[JobStatus],
    starts: Sequence[Start],
    displaced: Sequence[tuple[RankKey, JobStatus]],
    waiting: dict[str, str],
) -> list[Start]:
    """The jobs of ``pending_jobs`` (in rank order) that fit on the GPUs idle once the
    round's ``starts`` and preemptions (``displaced``) are carried out, started there in
    rank order, preempting no one; each started job's reason leaves ``waiting``.

    After its last admission (:data:`_ADMISSION_TRIES`), the jobs admitted but left
    unplaced hold their capacity budget (a GPU type held by higher-ranked jobs, say): with
    more such jobs than the tries take out, the jobs ranked below them were refused the
    budget and waited as "outranked" beside idle GPUs of another type that only they
    could use, while with fewer such jobs they started there."""
    after = DrainingFree(initial.copy(), view)
    for _, victim in displaced:
        after.release(victim.allocation)
    for start in starts:
        after.hold(start.allocation)
    started = {start.job_id for start in starts}
    refused: set[Shape] = set()  # shapes that found no room: capacity only shrinks here
    more: list[Start] = []
    for job in pending_jobs:
        if not after.any_room():
            break
        shape = shape_of(job.request)
        if job.id in started or asks_no_gpu(job) or shape in refused:
            continue
        alloc = after.place(job.request)
        if alloc is None:
            refused.add(shape)
        else:
            more.append(Start(job.id, alloc))
            waiting.pop(job.id, None)
    return more


def _preempt_where_it_fits(
    drain: DrainingFree,
    view: ClusterView,
    stuck: Sequence[tuple[RankKey, JobStatus]],
    running_keys: Sequence[RankKey],
    running_jobs: Sequence[JobStatus],
    victims: list[tuple[RankKey, JobStatus]],
) -> list[tuple[RankKey, Start]]:
    """Start the pending jobs of ``stuck`` (with their keys, in rank order: jobs admitted
    by :func:`_preempting_round` but left unplaced, since the GPUs the rank order freed are
    of another type or memory, or fragmented) by preempting running jobs ranked below them
    on GPUs they can use; those go into ``victims`` and the starts are returned (with their
    keys).

    The rank order picks its victims across the whole cluster: a job limited to the H100s
    would otherwise wait for ever while a lower-ranked job holds the only H100 and another
    one, on a V100, ranks lower still. For each such job, in rank order, the preemptible
    running jobs (not draining, not victims already) ranked below it that hold a GPU of its
    types and memory are freed lowest-ranked first until it can be placed; when all of them
    are not enough, they keep their GPUs (no preemption that starts nothing). A request
    shape that found no room is not tried again in the round: a job of that shape ranked
    lower has fewer jobs below it, so each shape costs a walk of the running jobs at most.
    """
    released = {victim.id for _, victim in victims}
    draining = drain.draining
    cluster = view.cluster
    opened = view.open_gpus()
    refused: set[Shape] = set()
    started: list[tuple[RankKey, Start]] = []
    for key, job in stuck:
        req = job.request
        shape = shape_of(req)
        if shape in refused:
            continue
        wanted = {name.lower() for name in req.gpu_types}
        room = drain.now if drain.soon is None else drain.soon
        freed: list[tuple[RankKey, JobStatus]] = []
        # the round's later releases may have left room already (for a job unplaced in an
        # earlier admission): then it preempts no one
        alloc = _place_if_room(drain, room, req)
        below = range(len(running_jobs) - 1, bisect_right(running_keys, key) - 1, -1)
        for index in below if alloc is None else ():
            victim = running_jobs[index]
            if (
                not victim.request.preemptible
                or victim.id in draining
                or victim.id in released
                or not any(
                    _may_use(cluster, opened, share.node, share.gpu, wanted, req.gpu_memory)
                    for share in victim.allocation.shares
                )
            ):
                continue
            drain.release(victim.allocation)
            freed.append((running_keys[index], victim))
            alloc = _place_if_room(drain, room, req)
            if alloc is not None:
                break
        if alloc is None:
            for _, victim in freed:
                drain.take(victim.allocation)
            refused.add(shape)
            continue
        released.update(victim.id for _, victim in freed)
        victims.extend(freed)
        started.append((key, Start(job.id, alloc)))
    return started


def _place_if_room(drain: DrainingFree, room: FreeMap, req: JobRequest) -> Allocation | None:
    """``req`` placed on ``drain``, or None; tried only when ``room`` (the map after the
    drain) has as many free GPUs of its kind as a whole-GPU request asks for (a cheap
    necessary condition; a share is always tried)."""
    if req.shares_gpu or room.free_for(req) >= req.gpus:
        return drain.place(req)
    return None


def _may_use(
    cluster: Cluster,
    opened: BoolArray | None,
    node: int,
    gpu: int,
    wanted: set[str],
    memory: int,
) -> bool:
    """Whether GPU ``gpu`` of node ``node`` is open to new work and of one of the
    ``wanted`` types (lower case; empty: any) with at least ``memory`` bytes."""
    kind = cluster.nodes[node].gpu_type
    if wanted and kind.name.lower() not in wanted:
        return False
    if memory > kind.memory:
        return False
    return opened is None or bool(opened[cluster.gpu_offset(node) + gpu])


_Admission = tuple[
    list[tuple[RankKey, JobStatus]], list[tuple[RankKey, JobStatus]], dict[str, str], str
]
"""Admitted pending jobs and rejected running jobs (each with its key, in rank order), the
waiting reasons so far, and the reason shared by the rest of the queue."""


def _admit(
    drain: DrainingFree,
    pending_keys: Sequence[RankKey],
    pending_jobs: Sequence[JobStatus],
    running_keys: Sequence[RankKey],
    running_jobs: Sequence[JobStatus],
    skip: set[str],
) -> _Admission:
    """Admission by rank within the capacity budget (see :func:`_preempting_round`); the
    pending jobs named in ``skip`` (known not to fit anywhere) take no budget."""
    free = drain.now
    fixed = 0
    draining = drain.draining
    if not draining and all(map(_PREEMPTIBLE, running_jobs)):
        run_keys, run_jobs = running_keys, running_jobs
    else:
        # Draining jobs are gone (their GPUs are ``drain.soon``'s) and not preemptible:
        # neither budget nor victims.
        movable = [
            (k, j)
            for k, j in zip(running_keys, running_jobs, strict=True)
            if j.request.preemptible and j.id not in draining
        ]
        run_keys = [k for k, _ in movable]
        run_jobs = [j for _, j in movable]
        fixed = sum(
            j.demand_milli
            for j in running_jobs
            if not j.request.preemptible and j.id not in draining
        )
    budget = free.cluster.total_gpus * MILLI_PER_GPU - fixed - free.closed_free_milli()
    capacity = budget
    """All a pending job could be given, whatever the ranks: more than this it can never
    get, and no higher-ranked job is what holds it back."""
    demand_before = [0, *accumulate(map(_DEMAND, run_jobs))]
    """``demand_before[i]``: milli-GPU held by the ``i`` best-ranked preemptible running jobs."""
    admitted: list[tuple[RankKey, JobStatus]] = []
    rejected: list[int] = []
    waiting: dict[str, str] = {}
    default = ""
    share_charges: dict[tuple[int, frozenset[str]], int] = {}  # by a share's memory and types
    p, r = 0, 0
    n_pending, n_running = len(pending_jobs), len(run_jobs)
    while p < n_pending or r < n_running:
        if budget <= 0:
            # Capacity is spoken for: every later running job falls below the line and
            # every later pending job waits for the same reason.
            rejected += range(r, n_running)
            default = "outranked: the cluster's capacity is held by higher-ranked jobs"
            break
        if r < n_running and (p >= n_pending or run_keys[r] < pending_keys[p]):
            # The running jobs ranked before the next pending one, as many as fit at once.
            end = n_running if p >= n_pending else bisect_left(run_keys, pending_keys[p], r)
            fit = bisect_right(demand_before, demand_before[r] + budget, r, end + 1) - 1
            if fit > r:
                budget -= demand_before[fit] - demand_before[r]
                r = fit
                continue
            rejected.append(r)  # the next one does not fit: it falls below the line
            r += 1
            continue
        job = pending_jobs[p]
        p += 1
        if job.id in skip:
            continue
        demand = job.demand_milli
        if demand >= MILLI_PER_GPU and job.request.shares_gpu:  # a share sized by memory
            size = (job.request.gpu_memory, job.request.gpu_types)
            charge = share_charges.get(size)
            if charge is None:  # not a whole GPU: its part of the largest it may use
                charge = share_charges[size] = least_share_milli(job.request, free.cluster)
            demand = charge
        if demand <= budget:
            admitted.append((pending_keys[p - 1], job))
            budget -= demand
        elif demand > capacity:  # "outranked" would blame jobs it may even outrank
            waiting[job.id] = (
                f"needs {_gpus_of_capacity(demand)}, more than the "
                f"{_gpus_of_capacity(max(capacity, 0))} of capacity new work may use (GPUs "
                "open to new work, less those held by jobs that may not be preempted)"
            )
        else:
            waiting[job.id] = (
                f"outranked: needs {_gpus_of_capacity(demand)} of capacity "
                "held by higher-ranked jobs"
            )
    victims = [(run_keys[i], run_jobs[i]) for i in rejected]
    return admitted, victims, waiting, default


def _gpus_of_capacity(milli: int) -> str:
    """``milli`` milli-GPU as a waiting reason says it: ``2 GPUs``, ``1 GPU``, ``0.25 GPU``
    (a share's part, never rounded to 0)."""
    whole, part = divmod(milli, MILLI_PER_GPU)
    if part:
        return f"{milli / MILLI_PER_GPU:.3f}".rstrip("0") + " GPU"
    return f"{whole} GPU" if whole == 1 else f"{whole} GPUs"


def _gpus_of(alloc: Allocation) -> set[tuple[int, int]]:
    return {(share.node, share.gpu) for share in alloc.shares}


def _only_for_higher_ranked(
    starts: list[tuple[RankKey, Start]],
    displaced: list[tuple[RankKey, JobStatus]],
    waiting: dict[str, str],
) -> tuple[list[Start], list[tuple[RankKey, JobStatus]]]:
    """The starts and preemptions left once no job is preempted for lower-ranked ones.

    A displaced running job none of whose GPUs goes to a start ranked above it keeps
    running, and the (lower-ranked) starts on its GPUs wait instead; that can leave another
    victim without a higher-ranked start on its GPUs, so this repeats until nothing changes.
    """
    if not displaced:
        return [start for _, start in starts], displaced
    on_gpu: dict[tuple[int, int], list[int]] = {}
    for index, (_, start) in enumerate(starts):
        for gpu in _gpus_of(start.allocation):
            on_gpu.setdefault(gpu, []).append(index)
    cancelled: set[int] = set()
    left = list(displaced)
    changed = True
    while changed:
        changed = False
        for entry in list(left):
            key, victim = entry
            over = {
                i
                for gpu in _gpus_of(victim.allocation)
                for i in on_gpu.get(gpu, ())
                if i not in cancelled
            }
            if any(starts[i][0] < key for i in over):
                continue
            for i in over:
                cancelled.add(i)
                waiting[starts[i][1].job_id] = (
                    f"outranked: would take the GPUs of {job_of_project(victim)}, which ranks "
                    "higher"
                )
            left.remove(entry)
            changed = True
    kept = [start for i, (_, start) in enumerate(starts) if i not in cancelled]
    return kept, left
