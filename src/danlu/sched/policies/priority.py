"""Priority scheduling with aging; preempts strictly lower-priority preemptible jobs."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from danlu.core.cluster import Allocation
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies.options import INF, OptionRange, check_options, check_reserve
from danlu.sched.policies.queue_round import queue_pass
from danlu.sched.policies.ranked import RankedJobs, RankKey, ranked_pending
from danlu.sched.policies.ranked_round import ranked_round
from danlu.sched.policies.reservation import NeverFits
from danlu.sched.policies.waiting import asks_no_gpu, job_of_project
from danlu.sched.view import ClusterView, JobStatus, Plan, Preempt, Start


@dataclass(frozen=True)
class PriorityPolicy:
    """Higher ``priority`` first; pending jobs gain ``aging_per_hour`` priority per hour waited.

    Aging orders the queue: a waiting job comes before every job submitted long enough
    after it (``aging_per_hour`` > 0), whatever their priorities. Coming first does not
    make it start, though: with the defaults (``backfill=True``, ``reserve=False``) a job
    that does not fit is skipped and the jobs behind it start on the GPUs that free up, so a
    wide job can wait for ever behind a steady stream of narrow jobs, even of its own
    priority, that never leaves enough GPUs free at once. ``reserve=True`` prevents that
    (EASY backfill, :mod:`.reservation`, from the running jobs' expected durations): the
    first job in the queue that cannot start holds a reservation that the jobs behind it may
    not delay, and aging brings every job to the head of the queue in time
    (``backfill=False`` prevents it too, by starting nothing behind a job that does not fit).

    Preemption compares base priorities only: a running job is preempted only for a job of
    strictly higher base priority, so aging cannot cause thrashing. Nor does the queue start
    a job only for it to be preempted: with ``preempt``, when the queue would start a
    preemptible job and leave waiting one of strictly higher base priority, the round is
    planned as the preemption pass plans it (by base priority, aging only within a
    priority), and that plan is taken if it starts a job the queue left waiting. Else the
    older job would start, be preempted for the higher one the next round and, on the
    control plane (where that start waits for the victim to checkpoint and exit), start
    again ahead of it once back in the queue, for ever. So with ``preempt`` aging puts a job
    ahead of one of higher priority only where that one could not take its GPUs anyway
    (another GPU type, more GPUs than there are), or where it may not be preempted
    (``preemptible: false``). Preemption keeps to strict order and to the reservation
    (:func:`keep_queue_order`): a job they hold back waits, whether ``preempt`` is set or
    not.

    Every job ages at the same rate, so the queue's order never changes with the clock:
    ``priority + rate x (now - submit)`` ranks jobs as ``priority - rate x submit`` does.
    """

    option_ranges: ClassVar[Mapping[str, OptionRange]] = {
        "aging_per_hour": (0.0, INF, (True, False))
    }
    """The numeric options' valid ranges, checked when the policy is built."""
    placement: str = "best-fit"
    _packing: PackingMemo = field(
        default_factory=PackingMemo, init=False, repr=False, compare=False
    )
    """What the ``fgd`` and ``danlu`` placements keep across rounds (the typical pods, the
    packing scorer)."""
    aging_per_hour: float = 1.0
    preempt: bool = True
    backfill: bool = True
    reserve: bool = False
    """EASY backfill (:mod:`.reservation`): a job that cannot start gets a reservation at
    the running jobs' expected ends, and lower-ranked jobs start only if they leave it be."""
    name: str = "priority"
    _queue: RankedJobs = field(
        default_factory=ranked_pending, init=False, repr=False, compare=False
    )
    _pending: RankedJobs = field(
        default_factory=ranked_pending, init=False, repr=False, compare=False
    )
    _running: RankedJobs = field(default_factory=RankedJobs, init=False, repr=False, compare=False)
    """The queue order and the preemption ranks, kept from round to round (a transparent
    cache: the plans are the same with a fresh policy; see :mod:`.ranked`)."""

    def __post_init__(self) -> None:
        check_options(self, self.option_ranges)
        check_reserve(self.name, self.backfill, self.reserve)

    def _aged(self, job: JobStatus) -> float:
        """Minus the effective priority, up to a shift shared by all jobs at one time."""
        req = job.request
        return self.aging_per_hour / 3600.0 * req.submit_time - req.priority

    def queue_key(self, job: JobStatus, now: float) -> tuple[RankKey, float]:
        """Effective (aged) priority, highest first; then submission order."""
        return (self._aged(job), job.request.seq, job.request.id), math.inf

    def preempt_key(self, job: JobStatus, now: float) -> tuple[RankKey, float]:
        """Base priority first; running jobs before waiting ones of the same priority (no
        preemption within a priority class); then the queue order."""
        req = job.request
        running = 0.0 if job.running else 1.0
        return (-req.priority, running, self._aged(job), req.seq, req.id), math.inf

    def schedule(self, view: ClusterView) -> Plan:
        now = view.time
        order = self._queue.update(view.pending, now, self.queue_key).jobs
        queued, blocked = queue_pass(
            view,
            order,
            self.placement,
            self.backfill,
            self.reserve,
            memo=self._packing,
            reserve_when_full=self.preempt,
        )
        if not self.preempt or not queued.has_waiting:
            return queued
        pending = self._pending.update(view.pending, now, self.preempt_key, like=self._queue)
        running = self._running.update(view.running, now, self.preempt_key)
        lowest_running = next(
            (
                -key[0]
                for key, job in zip(reversed(running.keys), reversed(running.jobs), strict=True)
                if job.request.preemptible and job.id not in view.draining
            ),
            None,
        )
        top_waiting = -pending.keys[0][0]
        preempting = lowest_running is not None and top_waiting > lowest_running
        if not preempting and not _starts_below_waiting(queued, order, pending):
            return queued
        # Waiting jobs never overtake running ones by the clock alone (see the docstring).
        plan = ranked_round(
            view,
            pending.keys,
            pending.jobs,
            lambda: (running.keys, running.jobs),
            self.placement,
            memo=self._packing,
        )
        if blocked is not None:  # strict order, or a reservation held
            plan = keep_queue_order(view, plan, queued, order, blocked)
        if not preempting and not _starts_others(plan, queued):
            return queued  # the preemption pass would start no one the queue pass left out
        return dataclasses.replace(plan, recheck_at=math.inf)


def _starts_below_waiting(queued: Plan, order: Sequence[JobStatus], pending: RankedJobs) -> bool:
    """Whether ``queued`` (the queue pass's plan, over ``order``) starts a preemptible job of
    lower base priority than a job it leaves waiting (``pending``: the view's pending jobs
    by :meth:`PriorityPolicy.preempt_key`, highest base priority first).

    The next round's preemption pass would preempt such a start for the waiting job if the
    job's GPUs let that one start; on the control plane, where that start waits for the
    victim to drain, the victim is back in the queue by then, aged ahead again, and the
    queue pass would start it again: the two would take turns for ever. Walks ``order`` no
    further than the queue pass did (to its last start), and ``pending`` to the first job
    left waiting."""
    if not queued.starts:
        return False
    started = {start.job_id for start in queued.starts}
    top = next(
        (
            job.request.priority
            for job in pending.jobs
            if job.id not in started and not asks_no_gpu(job)
        ),
        None,
    )
    if top is None:
        return False
    left = set(started)
    for job in order:  # the queue pass started these in this order: stop at the last one
        if job.id in left:
            if job.request.preemptible and job.request.priority < top:
                return True
            left.discard(job.id)
            if not left:
                break
    return False


def _starts_others(plan: Plan, queued: Plan) -> bool:
    """Whether ``plan`` starts a job that ``queued`` does not start."""
    in_queue = {start.job_id for start in queued.starts}
    return any(start.job_id not in in_queue for start in plan.starts)


def keep_queue_order(
    view: ClusterView,
    ranked: Plan,
    queued: Plan,
    order: Sequence[JobStatus],
    blocked: str | None = None,
) -> Plan:
    """``ranked`` (the preemption pass's plan) without the starts that the queue's strict
    order or reservation (``queued``: the queue pass's plan, over ``order``) holds back.

    A start is kept when its job comes in ``order`` before the first job neither plan
    starts, or when ``queued`` starts it too (it left the reservation be); the others wait
    with the queue pass's reason. A job that could never start holds back no one: one that
    asks for no GPU, or one that asks for more than the open cluster could ever give it
    (:class:`NeverFits`) unless it is ``blocked``, the job the queue pass named as holding
    the queue back (strict order stops at it; a reservation is never one's). A preemption
    is kept when a kept start of strictly higher base priority takes a GPU of the job
    preempted (a GPU shared with another job counts as taken); a job whose GPUs went only to
    starts dropped, or to starts of no higher priority placed beside them, keeps running,
    and those starts go where the queue pass put them (when it started them, on GPUs no kept
    start takes) or wait (:func:`_for_higher_priority`).
    """
    in_queue = {start.job_id for start in queued.starts}
    in_ranked = {start.job_id for start in ranked.starts}
    allowed = set(in_queue)
    never: NeverFits | None = None
    for job in order:
        if asks_no_gpu(job):
            continue  # it never starts, and holds back no one
        if job.id not in in_queue and job.id not in in_ranked:
            never = never or NeverFits(view)
            if job.id != blocked and never(job.request):
                continue  # as above: the queue pass gave it no reservation either
            break
        allowed.add(job.id)
    kept = tuple(start for start in ranked.starts if start.job_id in allowed)
    if len(kept) == len(ranked.starts):
        return ranked
    waiting = dict(ranked.waiting)
    for start in ranked.starts:
        if start.job_id not in allowed:
            waiting[start.job_id] = queued.reason(start.job_id) or "held back by the queue order"
    starts, gone = _for_higher_priority(view, kept, ranked.preempts, queued, waiting)
    preempts = tuple(victim for victim in ranked.preempts if victim.job_id in gone)
    marks = {job_id: mark for job_id, mark in ranked.marks.items() if job_id in gone}
    return dataclasses.replace(
        ranked, starts=starts, preempts=preempts, waiting=waiting, marks=marks
    )


def _gpus(allocation: Allocation) -> set[tuple[int, int]]:
    """The (node, GPU) pairs ``allocation`` holds a share of."""
    return {(share.node, share.gpu) for share in allocation.shares}


def _for_higher_priority(
    view: ClusterView,
    kept: Sequence[Start],
    preempts: Sequence[Preempt],
    queued: Plan,
    waiting: dict[str, str],
) -> tuple[tuple[Start, ...], set[str]]:
    """The starts of ``kept`` (the preemption pass's, less those the queue order dropped)
    and the ids of the jobs of ``preempts`` still preempted for them: a job only while a
    kept start of strictly higher base priority takes one of its GPUs. The preemption pass
    places every job on the GPUs its preemptions free, also a job of the victim's priority
    beside one of higher priority; once the queue order drops the higher one, that job
    alone would have the victim preempted (the rule is strictly higher priority). A victim
    that keeps running keeps its GPUs: the starts placed on them go where the queue pass
    put them (``queued``, when it started them, on GPUs no kept start takes) or wait with a
    reason in ``waiting``; that can leave another victim without a reason, so this repeats
    until nothing changes."""
    priority = {job.id: job.request.priority for job in view.pending}
    holds = {job.id: job for job in view.running}
    on_gpu: dict[tuple[int, int], list[Start]] = {}  # the kept starts on each GPU
    for start in kept:
        for gpu in _gpus(start.allocation):
            on_gpu.setdefault(gpu, []).append(start)
    dropped: dict[str, str] = {}  # the starts taken out, by job id: the victim in the way
    victims = [preempt.job_id for preempt in preempts]
    while True:
        stays: list[str] = []
        for victim in victims:
            least = holds[victim].request.priority
            if not any(
                priority[start.job_id] > least and start.job_id not in dropped
                for gpu in _gpus(holds[victim].allocation)
                for start in on_gpu.get(gpu, ())
            ):
                stays.append(victim)
        if not stays:
            break
        kept_running = set(stays)
        victims = [victim for victim in victims if victim not in kept_running]
        for victim in stays:  # it keeps its GPUs: what was placed on them cannot start there
            for gpu in _gpus(holds[victim].allocation):
                for start in on_gpu.get(gpu, ()):
                    dropped.setdefault(start.job_id, victim)
    starts = [start for start in kept if start.job_id not in dropped]
    if dropped:  # where the queue pass put them, when that is clear of every kept start
        instead = {start.job_id: start for start in queued.starts}
        taken = set().union(*(_gpus(start.allocation) for start in starts))
        for start in kept:
            holder = dropped.get(start.job_id)
            if holder is None:
                continue
            alternative = instead.get(start.job_id)
            if alternative is not None and not _gpus(alternative.allocation) & taken:
                starts.append(alternative)
                taken |= _gpus(alternative.allocation)
            else:
                waiting[start.job_id] = (
                    f"would take the GPUs of {job_of_project(holds[holder])}, of no lower "
                    "priority: not preempted for it"
                )
    return tuple(starts), set(victims)
