"""Shortest job first by the expected duration, with backfill; never preempts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies.options import OptionRange, check_options, check_reserve
from danlu.sched.policies.queue_round import queue_round
from danlu.sched.policies.ranked import RankedJobs, RankKey, ranked_pending
from danlu.sched.view import ClusterView, JobStatus, Plan


@dataclass(frozen=True)
class SjfPolicy:
    """Start the job with the least expected GPU time (``duration x GPUs``) first.

    Jobs without an expected duration go last, in submission order. ``by_gpu_time=False``
    orders by duration alone. ``reserve=True``: EASY backfill (:mod:`.reservation`): the
    first job in this order that cannot start holds a reservation that the jobs ranked
    *behind* it may not delay. A job ranked ahead of it (a shorter one, including one that
    arrives later) still starts before it, so under a steady stream of shorter jobs a wide
    job can wait for ever: the reservation protects it from longer jobs only (use ``fifo``
    with ``reserve``, or ``priority`` aging with ``reserve``, to bound its wait).
    """

    option_ranges: ClassVar[Mapping[str, OptionRange]] = {}
    """The numeric options' valid ranges, checked when the policy is built."""
    placement: str = "best-fit"
    _packing: PackingMemo = field(
        default_factory=PackingMemo, init=False, repr=False, compare=False
    )
    """What the ``fgd`` and ``danlu`` placements keep across rounds (the typical pods, the
    packing scorer)."""
    backfill: bool = True
    reserve: bool = False
    by_gpu_time: bool = True
    name: str = "sjf"

    _queue: RankedJobs = field(
        default_factory=ranked_pending, init=False, repr=False, compare=False
    )
    """The pending jobs in order, kept from round to round (a transparent cache)."""

    def __post_init__(self) -> None:
        check_options(self, self.option_ranges)
        check_reserve(self.name, self.backfill, self.reserve)

    def rank_key(self, job: JobStatus, now: float) -> tuple[RankKey, float]:
        """Expected (GPU) time, then submission order; the key never changes."""
        req = job.request
        size = (req.expected_duration or math.inf) * (max(req.gpus, 1) if self.by_gpu_time else 1)
        return (size, req.seq, req.id), math.inf

    def schedule(self, view: ClusterView) -> Plan:
        order = self._queue.update(view.pending, view.time, self.rank_key).jobs
        return queue_round(
            view, order, self.placement, self.backfill, self.reserve, memo=self._packing
        )
