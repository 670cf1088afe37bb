"""Tiresias (NSDI'19): discretised two-dimensional least-attained-service, preemptive.

A job's attained service is GPUs x seconds it has held them. ``thresholds`` cut service into
queues: a job enters queue 0 on arrival and moves down to queue ``k`` once its service
reaches ``thresholds[k-1]``; it is appended at the END of its new queue (the time it entered
is remembered in the job's policy marks). Lower queues go first; inside a queue jobs keep
first-come order (arrival for queue 0, demotion time below). Each round the ordered jobs are
admitted greedily by GPU count -- a job that does not fit is skipped and later, smaller jobs
may still run -- and running jobs below the line are preempted. A job's demotion time is the
exact moment its service crossed the threshold (the Pollux artifact notices it at the next
60 s round instead; the order of demotions is the same unless two fall in one interval).

Optional starvation guard (off by default, as in the Pollux artifact): a pending job that
has waited ``starvation_factor`` x its run time (and at least ``starvation_min`` s) since it
last stopped goes back to queue 0 with its service counted from zero. When it starts, the
policy's marks record the promotion (queue 0, the service it had then as the new zero), so
it stays in queue 0 while it runs and is demoted again only once its service since the
promotion crosses a threshold. The time a job stopped is marked when Tiresias preempts it; a
job stopped otherwise (a failure) counts as stopped at ``last_start + run_time``.

The defaults (two queues split at 16 GPU-hours, "worst-fit" placement that takes GPUs from
the emptiest nodes first) are those of the Pollux OSDI'21 artifact's Tiresias baseline, so
``danlu sim run --policy tiresias`` reproduces its published results.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.errors import ConfigError
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies.options import INF, OptionRange, check_options
from danlu.sched.policies.ranked import RankedJobs, RankKey, ranked_pending
from danlu.sched.policies.ranked_round import ranked_round
from danlu.sched.view import ClusterView, JobStatus, Plan

QUEUE = "tiresias.queue"
ENTERED = "tiresias.entered"
SERVICE_BASE = "tiresias.service_base"
"""Service (GPU-seconds) the job had when it was last promoted: queues count from there."""
STOPPED = "tiresias.stopped"
"""When Tiresias last preempted the job (the start of its wait for the starvation guard)."""


@dataclass(frozen=True)
class TiresiasPolicy:
    option_ranges: ClassVar[Mapping[str, OptionRange]] = {
        "thresholds": (0.0, INF, (False, False)),
        "starvation_factor": (0.0, INF, (True, False)),
        "starvation_min": (0.0, INF, (True, False)),
    }
    """The numeric options' valid ranges, checked when the policy is built."""
    placement: str = "worst-fit"
    _packing: PackingMemo = field(
        default_factory=PackingMemo, init=False, repr=False, compare=False
    )
    """What the ``fgd`` and ``danlu`` placements keep across rounds (the typical pods, the
    packing scorer)."""
    thresholds: tuple[float, ...] = (57600.0,)
    """Queue boundaries in GPU-seconds of attained service, ascending (K values, K+1 queues)."""
    starvation_factor: float = 0.0
    """Promote a pending job to queue 0 once waited >= factor x run time; 0 disables."""
    starvation_min: float = 0.0
    name: str = "tiresias"
    _pending: RankedJobs = field(
        default_factory=ranked_pending, init=False, repr=False, compare=False
    )
    _running: RankedJobs = field(default_factory=RankedJobs, init=False, repr=False, compare=False)
    """The pending and running jobs in rank order, kept from round to round (a transparent
    cache: the plans are the same with a fresh policy; see :mod:`.ranked`)."""

    def __post_init__(self) -> None:
        check_options(self, self.option_ranges)
        if list(self.thresholds) != sorted(self.thresholds):
            raise ConfigError(
                f"tiresias: thresholds must ascend (seconds of GPU service), got {self.thresholds}"
            )

    def queue_of(self, job: JobStatus, now: float) -> tuple[int, float]:
        """The job's queue (0 is served first) and the time it entered that queue.

        A running job's demotion time is the exact moment its service crossed the threshold,
        derived from its status; a job that stops keeps its queue in its marks.
        """
        marks = job.marks
        if marks:
            queue = int(marks.get(QUEUE, 0))
            entered = marks.get(ENTERED, job.request.submit_time)
            base = marks.get(SERVICE_BASE, 0.0)
        else:
            queue, entered, base = 0, job.request.submit_time, 0.0
        thresholds = self.thresholds
        if job.last_start is not None and job.allocation.shares:
            gpus = job.allocation.gpu_milli / MILLI_PER_GPU
            at_start = job.attained_service - base
            start_queue = bisect.bisect_right(thresholds, at_start)
            if start_queue > queue:  # crossed in an earlier run whose mark was lost
                queue, entered = start_queue, job.request.submit_time
            now_queue = bisect.bisect_right(thresholds, at_start + gpus * (now - job.last_start))
            if now_queue > queue and gpus > 0:
                crossing = thresholds[now_queue - 1]
                queue, entered = now_queue, job.last_start + (crossing - at_start) / gpus
            return queue, entered
        by_service = bisect.bisect_right(thresholds, job.attained_service - base)
        if by_service > queue:  # same fallback as for a running job: no swapping back and forth
            queue, entered = by_service, job.request.submit_time
        if self._promotable(job, queue) and now >= self._promotion_time(job):
            return 0, self._promotion_time(job)
        return queue, entered

    def _promotable(self, job: JobStatus, queue: int) -> bool:
        return self.starvation_factor > 0 and queue > 0 and job.run_time > 0

    def promoted(self, job: JobStatus, now: float) -> bool:
        """Whether the pending ``job`` is in queue 0 at ``now`` by the starvation guard."""
        if job.running or not self._promotable(job, 1):
            return False
        marks = job.marks
        queue = int(marks.get(QUEUE, 0))
        service = job.attained_service - marks.get(SERVICE_BASE, 0.0)
        queue = max(queue, bisect.bisect_right(self.thresholds, service))
        return queue > 0 and now >= self._promotion_time(job)

    def _promotion_time(self, job: JobStatus) -> float:
        """When the pending ``job`` is promoted: the time it stopped plus its wait."""
        start = job.request.submit_time if job.last_start is None else job.last_start
        stopped = job.marks.get(STOPPED, -math.inf)
        if stopped < start:  # not marked, or marked before its last run: one run assumed
            stopped = start + job.run_time
        return stopped + max(self.starvation_min, self.starvation_factor * job.run_time)

    def _demotion_time(self, service: float, gpus: float, now: float) -> float:
        """When a job that has ``service`` GPU-seconds (counted from its last promotion) at
        ``now`` and runs on ``gpus`` GPUs crosses its next threshold (inf: none is left)."""
        index = bisect.bisect_right(self.thresholds, service)
        if index < len(self.thresholds) and gpus > 0:
            return now + (self.thresholds[index] - service) / gpus
        return math.inf

    def _valid_until(self, job: JobStatus, now: float) -> float:
        """Until when ``queue_of`` stays what it is at ``now`` (if the status is unchanged)."""
        if job.last_start is not None and job.allocation.shares:
            gpus = job.allocation.gpu_milli / MILLI_PER_GPU
            service = job.attained_at(now) - job.marks.get(SERVICE_BASE, 0.0)
            return self._demotion_time(service, gpus, now)
        if self.starvation_factor > 0 and job.run_time > 0:
            promotion = self._promotion_time(job)
            if now < promotion:
                return promotion
        return math.inf

    def rank_key(self, job: JobStatus, now: float) -> tuple[RankKey, float]:
        """The job's rank (queue, time it entered the queue, submission order) at ``now``,
        and the time until which it holds."""
        queue, entered = self.queue_of(job, now)
        return (queue, entered, job.request.seq, job.request.id), self._valid_until(job, now)

    def schedule(self, view: ClusterView) -> Plan:
        now = view.time
        pending = self._pending.update(view.pending, now, self.rank_key)
        running = self._running.update(view.running, now, self.rank_key)

        def mark(job: JobStatus) -> dict[str, float]:
            queue, entered = running.key_of(job)[:2]
            marks = {QUEUE: float(queue), ENTERED: entered}
            if self.starvation_factor > 0:  # the guard counts the wait from here
                marks[STOPPED] = now
            return marks

        plan = ranked_round(
            view,
            pending.keys,
            pending.jobs,
            lambda: (running.keys, running.jobs),
            self.placement,
            mark,
            memo=self._packing,
        )
        if self.starvation_factor > 0 and plan.starts:
            plan = dataclasses.replace(plan, marks=self._promotion_marks(view, plan))
        recheck = math.inf
        if plan.has_waiting or plan.preempts:
            # A waiting job (a preempted one waits too) may overtake a running one once that
            # one is demoted (or a waiting one is promoted): the jobs the plan starts and
            # stops count as well as those that keep running, or the rounds skipped until
            # then could differ.
            recheck = min(running.expiry, self._next_change(view, plan, pending, running))
            if self.starvation_factor > 0:
                recheck = min(recheck, pending.expiry)
        return dataclasses.replace(plan, recheck_at=recheck)

    def _next_change(
        self, view: ClusterView, plan: Plan, pending: RankedJobs, running: RankedJobs
    ) -> float:
        """The earliest time a job ``plan`` starts is demoted (its service counted from the
        plan's marks, which hold a promotion) or, with the starvation guard, a job it
        preempts out of a lower queue is promoted. ``pending``/``running``: the view's jobs
        in rank order; the walk through ``pending`` stops at the last started job, which
        the round reached anyway."""
        now = view.time
        soonest = math.inf
        if self.starvation_factor > 0 and plan.preempts:
            stopped = {p.job_id for p in plan.preempts}
            for job in view.running:
                run_time = job.run_time_at(now)
                if job.id in stopped and run_time > 0 and running.key_of(job)[0] > 0:
                    wait = max(self.starvation_min, self.starvation_factor * run_time)
                    soonest = min(soonest, now + wait)
        starts = {s.job_id: s.allocation for s in plan.starts}
        for job in pending.jobs:
            if not starts:
                break
            alloc = starts.pop(job.id, None)
            if alloc is None:
                continue
            base = plan.marks.get(job.id, {}).get(SERVICE_BASE, job.marks.get(SERVICE_BASE, 0.0))
            gpus = alloc.gpu_milli / MILLI_PER_GPU
            soonest = min(soonest, self._demotion_time(job.attained_service - base, gpus, now))
        return soonest

    def _promotion_marks(self, view: ClusterView, plan: Plan) -> dict[str, dict[str, float]]:
        """``plan``'s marks plus, for each job it starts by the starvation guard's promotion,
        queue 0 from the promotion on with its service counted from there."""
        marks = dict(plan.marks)
        started = {s.job_id for s in plan.starts}
        for job in view.pending:
            if job.id in started and self.promoted(job, view.time):
                marks[job.id] = {
                    **marks.get(job.id, {}),
                    QUEUE: 0.0,
                    ENTERED: self._promotion_time(job),
                    SERVICE_BASE: job.attained_service,
                }
        return marks
