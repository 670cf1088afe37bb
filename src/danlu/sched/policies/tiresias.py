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
has waited ``starvation_factor`` x its run time (and at least ``starvation_min`` s) goes
back to queue 0 with its service counted from zero.

The defaults (two queues split at 16 GPU-hours, "worst-fit" placement that takes GPUs from
the emptiest nodes first) are those of the Pollux OSDI'21 artifact's Tiresias baseline, so
``danlu sim run --policy tiresias`` reproduces its published results.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass, field

from danlu.core.cluster import MILLI_PER_GPU
from danlu.sched.policies.base import preemptive_round
from danlu.sched.view import ClusterView, JobStatus, Plan

QUEUE = "tiresias.queue"
ENTERED = "tiresias.entered"
SERVICE_BASE = "tiresias.service_base"


@dataclass(frozen=True)
class TiresiasPolicy:
    placement: str = "worst-fit"
    thresholds: tuple[float, ...] = (57600.0,)
    """Queue boundaries in GPU-seconds of attained service, ascending (K values, K+1 queues)."""
    starvation_factor: float = 0.0
    """Promote a pending job to queue 0 once waited >= factor x run time; 0 disables."""
    starvation_min: float = 0.0
    name: str = "tiresias"
    _memo: dict[str, tuple[JobStatus, float, tuple[int, float, int, str]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Rank keys by job, reused while the job's status object is unchanged and no threshold
    is crossed (a transparent cache: results are the same with or without it)."""

    def __post_init__(self) -> None:
        if list(self.thresholds) != sorted(self.thresholds):
            raise ValueError(f"tiresias thresholds must ascend, got {self.thresholds}")

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
        promotable = self.starvation_factor > 0 and queue > 0 and job.run_time > 0
        if promotable and now >= self._promotion_time(job):
            return 0, self._promotion_time(job)
        return queue, entered

    def _promotion_time(self, job: JobStatus) -> float:
        stopped = (job.last_start or job.request.submit_time) + job.run_time
        return stopped + max(self.starvation_min, self.starvation_factor * job.run_time)

    def _next_change(self, view: ClusterView) -> float:
        """When the next running job crosses a threshold (or a waiting one is promoted)."""
        soonest = math.inf
        for job in view.running:
            if job.last_start is None:
                continue
            gpus = job.allocation.gpu_milli / MILLI_PER_GPU
            service = job.attained_at(view.time) - job.marks.get(SERVICE_BASE, 0.0)
            index = bisect.bisect_right(self.thresholds, service)
            if index < len(self.thresholds) and gpus > 0:
                soonest = min(soonest, view.time + (self.thresholds[index] - service) / gpus)
        if self.starvation_factor > 0:
            for job in view.pending:
                if job.run_time > 0:
                    soonest = min(soonest, self._promotion_time(job))
        return soonest

    def _valid_until(self, job: JobStatus, now: float) -> float:
        """Until when ``queue_of`` stays what it is at ``now`` (if the status is unchanged)."""
        if job.last_start is not None and job.allocation.shares:
            gpus = job.allocation.gpu_milli / MILLI_PER_GPU
            service = job.attained_at(now) - job.marks.get(SERVICE_BASE, 0.0)
            index = bisect.bisect_right(self.thresholds, service)
            if index < len(self.thresholds) and gpus > 0:
                return now + (self.thresholds[index] - service) / gpus
            return math.inf
        if self.starvation_factor > 0 and job.run_time > 0:
            return self._promotion_time(job)
        return math.inf

    def schedule(self, view: ClusterView) -> Plan:
        now = view.time
        memo = self._memo
        fresh: dict[str, tuple[JobStatus, float, tuple[int, float, int, str]]] = {}

        def rank(job: JobStatus) -> tuple[int, float, int, str]:
            job_id = job.request.id
            hit = fresh.get(job_id)
            if hit is None:
                hit = memo.get(job_id)
            if hit is not None and hit[0] is job and now < hit[1]:
                fresh[job_id] = hit
                return hit[2]
            queue, entered = self.queue_of(job, now)
            key = (queue, entered, job.request.seq, job_id)
            fresh[job_id] = (job, self._valid_until(job, now), key)
            return key

        plan = preemptive_round(view, rank, self.placement)
        marks = {
            p.job_id: {QUEUE: float(rank_[0]), ENTERED: rank_[1]}
            for p in plan.preempts
            for rank_ in (fresh[p.job_id][2],)
        }
        recheck = math.inf
        if plan.has_waiting:
            # A waiting job may overtake a running one once that one is demoted.
            recheck = min(
                (
                    hit[1]
                    if (hit := fresh.get(j.request.id)) is not None and hit[0] is j
                    else self._valid_until(j, now)
                    for j in view.running
                ),
                default=math.inf,
            )
            if self.starvation_factor > 0:
                recheck = min(recheck, self._next_change(view))
        memo.clear()
        memo.update(fresh)
        return dataclasses.replace(plan, marks=marks, recheck_at=recheck)
