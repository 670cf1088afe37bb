"""Value-density preemptive scheduling (seed 004): rank by priority / expected remaining time.

``value = w(priority) / remaining``, with ``w(p) = 2^(p / priority_scale)`` so that any
integer priority (negative too) maps to a positive weight and one ``priority_scale`` step
doubles a job's value. ``remaining`` is the expected duration minus the time already run
(never below ``min_remaining``). A running job's value is raised by the restart cost it would
pay if preempted (``hysteresis``: its remaining time counts ``restart_cost`` seconds less),
so two jobs of similar value never trade places back and forth.

Jobs are ranked by the base-2 logarithm of the value density,
``priority / priority_scale - log2(remaining x GPUs)``: ``w(p)`` itself leaves the range of a
float from ``p = 1024 x priority_scale`` up (and rounds to 0 from about ``-1075 x
priority_scale`` down), while priorities may run to +-1,000,000.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from danlu.core.cluster import Cluster
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies.options import INF, OptionRange, check_options
from danlu.sched.policies.ranked import (
    RankedJobs,
    RankKey,
    key_on_cluster,
    ranked_pending,
)
from danlu.sched.policies.ranked_round import ranked_round
from danlu.sched.share_size import ranked_gpus
from danlu.sched.view import ClusterView, JobStatus, Plan


@dataclass(frozen=True)
class ValueDensityPolicy:
    option_ranges: ClassVar[Mapping[str, OptionRange]] = {
        "priority_scale": (0.0, INF, (False, False)),
        "default_duration": (0.0, INF, (False, False)),
        "restart_cost": (0.0, INF, (True, False)),
        "min_remaining": (0.0, INF, (False, False)),
    }
    """The numeric options' valid ranges, checked when the policy is built."""
    placement: str = "best-fit"
    _packing: PackingMemo = field(
        default_factory=PackingMemo, init=False, repr=False, compare=False
    )
    """What the ``fgd`` and ``danlu`` placements keep across rounds (the typical pods, the
    packing scorer)."""
    priority_scale: float = 1.0
    default_duration: float = 3600.0
    """Seconds assumed for jobs that give no expected duration."""
    restart_cost: float = 30.0
    min_remaining: float = 1.0
    name: str = "value-density"
    _pending: RankedJobs = field(
        default_factory=ranked_pending, init=False, repr=False, compare=False
    )
    """The pending jobs in rank order, kept from round to round (a transparent cache, see
    :mod:`.ranked`): a waiting job's rank does not change while it waits, so a round ranks
    and inserts only the jobs new to the queue instead of sorting 10,000 again."""
    _sizes: list[object] = field(default_factory=list, init=False, repr=False, compare=False)
    """The cluster's GPU sizes the cached order was ranked for (:func:`.ranked.key_on_cluster`)."""

    def __post_init__(self) -> None:
        check_options(self, self.option_ranges)

    def log_density(self, job: JobStatus, now: float, cluster: Cluster | None = None) -> float:
        """``log2`` of :meth:`density`, finite for every priority (what jobs are ranked by);
        a share of one GPU counts its part of it (:func:`~danlu.sched.share_size.ranked_gpus`,
        of a GPU of ``cluster`` when sized by memory)."""
        req = job.request
        duration = req.expected_duration
        if duration is None:  # 0 s is an estimate (the shortest), not a missing one
            duration = self.default_duration
        remaining = max(self.min_remaining, duration - job.run_time_at(now))
        if job.running:
            remaining = max(self.min_remaining, remaining - self.restart_cost)
        gpus = ranked_gpus(job, cluster)  # a share of one GPU: its part
        gpu_seconds = remaining * gpus
        # past a float's range, two logs: an infinite log beside a priority term that is
        # infinite too (a subnormal priority_scale) ranked as NaN
        log_gpu_seconds = (
            math.log2(gpu_seconds)
            if gpu_seconds < math.inf
            else math.log2(remaining) + math.log2(gpus)
        )
        return req.priority / self.priority_scale - log_gpu_seconds

    def density(self, job: JobStatus, now: float, cluster: Cluster | None = None) -> float:
        """Value per second of remaining GPU time (higher runs first); ``inf`` or 0 where
        it leaves the range of a float (ranks use :meth:`log_density`)."""
        log = self.log_density(job, now, cluster)
        return math.inf if log >= 1024.0 else float(2.0**log)

    def rank_key(
        self, job: JobStatus, now: float, cluster: Cluster | None = None
    ) -> tuple[RankKey, float]:
        """Density, highest first; then submission time and id (unique). A waiting job's
        holds while its status is the same (its run time does not grow); a running job's is
        for ``now`` only."""
        key = (-self.log_density(job, now, cluster), job.request.submit_time, job.id)
        return key, (now if job.running else math.inf)

    def schedule(self, view: ClusterView) -> Plan:
        now = view.time
        rank = key_on_cluster(self._pending, self._sizes, view.cluster, self.rank_key)
        pending = self._pending.update(view.pending, now, rank)

        def running() -> tuple[list[RankKey], list[JobStatus]]:
            ranked = sorted((rank(j, now)[0], j) for j in view.running)
            return [key for key, _ in ranked], [job for _, job in ranked]

        plan = ranked_round(
            view, pending.keys, pending.jobs, running, self.placement, memo=self._packing
        )
        # Waiting jobs never overtake running ones by the clock alone (see the docstring).
        return dataclasses.replace(plan, recheck_at=math.inf)
