"""First in, first out: jobs start in submission order; never preempts."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies.options import OptionRange, check_options, check_reserve
from danlu.sched.policies.queue_round import queue_round
from danlu.sched.view import ClusterView, Plan

_SUBMISSION_ORDER = operator.attrgetter("request.seq")


@dataclass(frozen=True)
class FifoPolicy:
    """Start jobs in submission order.

    ``backfill=False`` (default) is strict FIFO: a job that does not fit blocks the ones
    behind it. With ``backfill=True`` later jobs that fit may start first; with
    ``reserve=True`` as well, only those that do not delay the first blocked job's
    reservation (EASY backfill, :mod:`.reservation`).
    """

    option_ranges: ClassVar[Mapping[str, OptionRange]] = {}
    """The numeric options' valid ranges, checked when the policy is built."""
    placement: str = "best-fit"
    _packing: PackingMemo = field(
        default_factory=PackingMemo, init=False, repr=False, compare=False
    )
    """What the ``fgd`` and ``danlu`` placements keep across rounds (the typical pods, the
    packing scorer)."""
    backfill: bool = False
    reserve: bool = False
    name: str = "fifo"

    def __post_init__(self) -> None:
        check_options(self, self.option_ranges)
        check_reserve(self.name, self.backfill, self.reserve)

    def schedule(self, view: ClusterView) -> Plan:
        # Near O(n) when the view keeps its promised submission order (timsort on sorted
        # input), and still correct when an adapter does not.
        order = sorted(view.pending, key=_SUBMISSION_ORDER)
        return queue_round(
            view, order, self.placement, self.backfill, self.reserve, memo=self._packing
        )
