"""Priority scheduling with aging; preempts strictly lower-priority preemptible jobs."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from danlu.sched.policies.base import order_by, preemptive_round, queue_round
from danlu.sched.view import ClusterView, JobStatus, Plan


@dataclass(frozen=True)
class PriorityPolicy:
    """Higher ``priority`` first; pending jobs gain ``aging_per_hour`` priority per hour waited.

    Aging orders the queue (so low-priority jobs are never starved by a stream of equal
    ones) but preemption compares base priorities only: a running job is preempted only for a
    job of strictly higher base priority, so aging cannot cause thrashing.
    """

    placement: str = "best-fit"
    aging_per_hour: float = 1.0
    preempt: bool = True
    backfill: bool = True
    name: str = "priority"

    def schedule(self, view: ClusterView) -> Plan:
        now = view.time
        aging = self.aging_per_hour / 3600.0

        def queue_key(job: JobStatus) -> tuple[float, float, str]:
            req = job.request
            effective = req.priority + aging * max(0.0, now - req.submit_time)
            return (-effective, req.submit_time, req.id)

        effective = [
            -(j.request.priority + aging * max(0.0, now - j.request.submit_time))
            for j in view.pending
        ]
        order = order_by(view.pending, effective)
        plan = queue_round(view, order, self.placement, self.backfill)
        if not self.preempt or not plan.has_waiting or not view.running:
            return plan
        lowest_running = min(
            (j.request.priority for j in view.running if j.request.preemptible), default=None
        )
        top_waiting = max(view.pending, key=lambda j: j.request.priority).request.priority
        if lowest_running is None or top_waiting <= lowest_running:
            return plan

        def rank(job: JobStatus) -> tuple[float, float, float, str]:
            # Running jobs first among equals: preemption only across base-priority classes.
            req = job.request
            return (-req.priority, 0.0 if job.running else 1.0, queue_key(job)[0], req.id)

        # Waiting jobs never overtake running ones by the clock alone (see the docstring).
        return dataclasses.replace(
            preemptive_round(view, rank, self.placement), recheck_at=math.inf
        )
