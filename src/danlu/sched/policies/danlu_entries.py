"""The ``danlu`` policy's per-job round inputs that depend on a job's status object alone.

:class:`~danlu.sched.policies.danlu.DanluPolicy` caches one entry per status object (by
``id``) so that a round costs in proportion to the jobs that changed: a pending job's
options and rank, a running job's marks, hold and options. Value types only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from danlu.sched.policies.danlu_alloc import Option
from danlu.sched.view import JobRequest, JobStatus


@dataclass(frozen=True, slots=True)
class WaitingEntry:
    """A pending job's round inputs that depend on its status object alone."""

    status: JobStatus
    options: list[Option]
    best: float
    """Its rank before the aging weight: ``min T(n) * (1 + width * n / C)``."""
    waiting_from: float
    """Submission plus time run: ``now - waiting_from`` is the wait that ages it."""
    starving_from: float
    seq: int
    shared: bool = False
    """A shared (fractional) request: placed by :func:`place_shared`, not the walk."""

    def of(self, status: JobStatus) -> WaitingEntry:
        """This entry for another status object equal to its own (``dataclasses.replace``
        costs as much as computing the entry again)."""
        return WaitingEntry(
            status,
            self.options,
            self.best,
            self.waiting_from,
            self.starving_from,
            self.seq,
            self.shared,
        )


@dataclass(frozen=True, slots=True)
class RunningEntry:
    """A preemptible running job's round inputs that depend on its status object alone."""

    status: JobStatus
    marks: Mapping[str, float]
    """Its marks with the current measurement remembered."""
    update: dict[str, float]
    """The marks that measurement adds (to be written; never mutated)."""
    hold: float
    """Seconds after its (re)start during which it is neither shrunk nor preempted."""
    stuck: bool
    """Held for good: ``max_moves`` reached, or a shared request."""
    shares: bool
    start: float
    """Its last (re)start (``inf`` when unknown)."""
    options: list[Option] | None
    """A job without observations: its one option, keeping it, built in the round its
    status was first seen. Only its GPUs count: the walk compares the times of one job's
    options with each other, never a lone option's; the rank is computed from the current
    remaining time every round. (Reused, not rebuilt, so that a round allocates in
    proportion to the jobs that changed, not to all the running ones.)"""
    submit: float
    run_time: float
    """Seconds run before ``start``."""
    expected: float
    """Its expected duration (``nan`` when unknown)."""
    gpus: int
    promoted_until: float = -math.inf
    """The end of the hold the starvation rule gave it (``-inf``: none)."""

    def of(self, status: JobStatus) -> RunningEntry:
        """This entry for another status object equal to its own."""
        return RunningEntry(
            status,
            self.marks,
            self.update,
            self.hold,
            self.stuck,
            self.shares,
            self.start,
            self.options,
            self.submit,
            self.run_time,
            self.expected,
            self.gpus,
            self.promoted_until,
        )


NO_WAITING = WaitingEntry(JobStatus(JobRequest("", 0.0)), [], math.inf, 0.0, 0.0, 0)
"""Stands for a cache miss: its status is no job's."""


NO_RUNNING = RunningEntry(
    NO_WAITING.status, {}, {}, 0.0, False, False, math.inf, None, 0.0, 0.0, 0.0, 0
)
"""Stands for a cache miss of a running job."""
