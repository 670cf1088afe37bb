"""Tiresias (NSDI'19): discretised two-dimensional least-attained-service, preemptive.

A job's attained service is GPUs x seconds it has held them. ``thresholds`` cut service into
queues: a job enters queue 0 on arrival and moves down to queue ``k`` once its service
reaches ``thresholds[k-1]``; it is appended at the END of its new queue (the time it entered
is remembered in the job's policy marks). Lower queues go first; inside a queue jobs keep
first-come order (arrival for queue 0, demotion time below). Each round the ordered jobs are
admitted greedily by GPU count -- a job that does not fit is skipped and later, smaller jobs
may still run -- and running jobs below the line are preempted.

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
from dataclasses import dataclass

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
    time_invariant: bool = False

    def __post_init__(self) -> None:
        if list(self.thresholds) != sorted(self.thresholds):
            raise ValueError(f"tiresias thresholds must ascend, got {self.thresholds}")

    def classify(self, job: JobStatus, now: float) -> tuple[int, float, dict[str, float] | None]:
        """The job's queue, the time it entered it, and new marks to store (or None)."""
        queue = int(job.marks.get(QUEUE, 0))
        entered = job.marks.get(ENTERED, job.request.submit_time)
        base = job.marks.get(SERVICE_BASE, 0.0)
        service = job.attained_at(now) - base
        if self.starvation_factor > 0 and queue > 0 and not job.running and job.run_time > 0:
            waited = now - (job.last_start or job.request.submit_time) - job.run_time
            if waited >= max(self.starvation_min, self.starvation_factor * job.run_time):
                marks = {QUEUE: 0.0, ENTERED: now, SERVICE_BASE: job.attained_service}
                return 0, now, marks
        by_service = bisect.bisect_right(self.thresholds, service)
        if by_service > queue:
            return by_service, now, {QUEUE: float(by_service), ENTERED: now, SERVICE_BASE: base}
        return queue, entered, None

    def schedule(self, view: ClusterView) -> Plan:
        now = view.time
        keys: dict[str, tuple[int, float, int, str]] = {}
        marks: dict[str, dict[str, float]] = {}
        for job in (*view.running, *view.pending):
            queue, entered, new_marks = self.classify(job, now)
            keys[job.id] = (queue, entered, job.request.seq, job.id)
            if new_marks is not None:
                marks[job.id] = new_marks
        plan = preemptive_round(view, lambda j: keys[j.id], self.placement)
        return dataclasses.replace(plan, marks=marks) if marks else plan
