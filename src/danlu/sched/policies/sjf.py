"""Shortest job first by the expected duration, with backfill; never preempts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from danlu.sched.policies.base import order_by, queue_round
from danlu.sched.view import ClusterView, Plan


@dataclass(frozen=True)
class SjfPolicy:
    """Start the job with the least expected GPU time (``duration x GPUs``) first.

    Jobs without an expected duration go last, in submission order. ``by_gpu_time=False``
    orders by duration alone.
    """

    placement: str = "best-fit"
    backfill: bool = True
    by_gpu_time: bool = True
    name: str = "sjf"

    def schedule(self, view: ClusterView) -> Plan:
        pending = view.pending
        weight = self.by_gpu_time
        sizes = [
            (j.request.expected_duration or math.inf) * (max(j.request.gpus, 1) if weight else 1)
            for j in pending
        ]
        return queue_round(view, order_by(pending, sizes), self.placement, self.backfill)
