"""Shortest job first by the expected duration, with backfill; never preempts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from danlu.core.cluster import Cluster
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies.options import OptionRange, check_options, check_reserve
from danlu.sched.policies.queue_round import queue_round
from danlu.sched.policies.ranked import (
    RankedJobs,
    RankKey,
    key_on_cluster,
    ranked_pending,
)
from danlu.sched.share_size import ranked_gpus
from danlu.sched.view import ClusterView, JobStatus, Plan


@dataclass(frozen=True)
class SjfPolicy:
    """Start the job with the least expected GPU time (``duration x GPUs``) first (a share
    of one GPU counts its part of it: :func:`~danlu.sched.share_size.ranked_gpus`).

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
    _sizes: list[object] = field(default_factory=list, init=False, repr=False, compare=False)
    """The cluster's GPU sizes the cached order was ranked for (:func:`.ranked.key_on_cluster`)."""

    def __post_init__(self) -> None:
        check_options(self, self.option_ranges)
        check_reserve(self.name, self.backfill, self.reserve)

    def rank_key(
        self, job: JobStatus, now: float, cluster: Cluster | None = None
    ) -> tuple[RankKey, float]:
        """Expected (GPU) time, then submission order; the key never changes (a share of
        one GPU counts its part of it, :func:`~danlu.sched.share_size.ranked_gpus`, of a
        GPU of ``cluster`` when sized by memory)."""
        req = job.request
        gpus = ranked_gpus(job, cluster) if self.by_gpu_time else 1
        # an estimate of 0 s is the shortest there is, not a missing one (``or`` read it so)
        duration = math.inf if req.expected_duration is None else req.expected_duration
        size = duration * gpus
        return (size, req.seq, req.id), math.inf

    def schedule(self, view: ClusterView) -> Plan:
        key = key_on_cluster(self._queue, self._sizes, view.cluster, self.rank_key)
        order = self._queue.update(view.pending, view.time, key).jobs
        return queue_round(
            view, order, self.placement, self.backfill, self.reserve, memo=self._packing
        )
