"""Value-density preemptive scheduling (seed 004): rank by priority / expected remaining time.

``value = w(priority) / remaining``, with ``w(p) = 2^(p / priority_scale)`` so that any
integer priority (negative too) maps to a positive weight and one ``priority_scale`` step
doubles a job's value. ``remaining`` is the expected duration minus the time already run
(never below ``min_remaining``). A running job's value is raised by the restart cost it would
pay if preempted (``hysteresis``: its remaining time counts ``restart_cost`` seconds less),
so two jobs of similar value never trade places back and forth.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies.base import preemptive_round
from danlu.sched.policies.options import INF, OptionRange, check_options
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
    _waiting_ranks: dict[int, tuple[JobStatus, tuple[float, float, str]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """A pending job's rank by ``id`` of its status (kept with it, so that the ``id`` is not
    another's): it does not change while the job waits, and adapters keep the status
    objects of unchanged jobs, so a round ranks only the jobs new to the queue."""

    def __post_init__(self) -> None:
        check_options(self, self.option_ranges)

    def density(self, job: JobStatus, now: float) -> float:
        """Value per second of remaining GPU time (higher runs first)."""
        req = job.request
        duration = req.expected_duration or self.default_duration
        remaining = max(self.min_remaining, duration - job.run_time_at(now))
        if job.running:
            remaining = max(self.min_remaining, remaining - self.restart_cost)
        weight = float(2.0 ** (req.priority / self.priority_scale))
        return weight / (remaining * max(req.gpus, 1))

    def schedule(self, view: ClusterView) -> Plan:
        known = self._waiting_ranks
        kept: dict[int, tuple[JobStatus, tuple[float, float, str]]] = {}

        def rank(job: JobStatus) -> tuple[float, float, str]:
            if job.running:
                return (-self.density(job, view.time), job.request.submit_time, job.id)
            entry = known.get(id(job))
            if entry is None or entry[0] is not job:
                entry = (job, (-self.density(job, view.time), job.request.submit_time, job.id))
            kept[id(job)] = entry
            return entry[1]

        plan = preemptive_round(view, rank, self.placement, memo=self._packing)
        known.clear()
        known.update(kept)

        # Waiting jobs never overtake running ones by the clock alone (see the docstring).
        return dataclasses.replace(plan, recheck_at=math.inf)
