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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.errors import ConfigError
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies.base import ranked_round
from danlu.sched.policies.options import INF, OptionRange, check_options
from danlu.sched.policies.ranked import RankedJobs, RankKey, ranked_pending
from danlu.sched.view import ClusterView, JobStatus, Plan

QUEUE = "tiresias.queue"
ENTERED = "tiresias.entered"
SERVICE_BASE = "tiresias.service_base"


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
        promotable = self.starvation_factor > 0 and queue > 0 and job.run_time > 0
        if promotable and now >= self._promotion_time(job):
            return 0, self._promotion_time(job)
        return queue, entered

    def _promotion_time(self, job: JobStatus) -> float:
        stopped = (job.last_start or job.request.submit_time) + job.run_time
        return stopped + max(self.starvation_min, self.starvation_factor * job.run_time)

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
            return {QUEUE: float(queue), ENTERED: entered}

        plan = ranked_round(
            view,
            pending.keys,
            pending.jobs,
            lambda: (running.keys, running.jobs),
            self.placement,
            mark,
            memo=self._packing,
        )
        recheck = math.inf
        if plan.has_waiting:
            # A waiting job may overtake a running one once that one is demoted (or a
            # waiting one is promoted).
            recheck = running.expiry
            if self.starvation_factor > 0:
                recheck = min(recheck, pending.expiry)
        return dataclasses.replace(plan, recheck_at=recheck)
