"""The ``danlu`` policy's per-job round inputs that depend on a job's status object alone.

:class:`~danlu.sched.policies.danlu.DanluPolicy` caches one entry per status object
(:class:`EntryCache`) so that a round costs in proportion to the jobs that changed: a
pending job's options and rank, a running job's marks, hold and options.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import compress, repeat
from operator import attrgetter, is_not
from typing import Generic, NamedTuple, TypeVar, cast

from danlu.sched.policies.danlu_alloc import Option
from danlu.sched.view import JobRequest, JobStatus


class WaitingEntry(NamedTuple):
    """A pending job's round inputs that depend on its status object alone (a named tuple:
    built for every queued job in a first round, 10,000 at 1,000 nodes, where a frozen
    dataclass's construction cost 5x as much)."""

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


class RunningEntry(NamedTuple):
    """A preemptible running job's round inputs that depend on its status object alone (a
    named tuple, as :class:`WaitingEntry`: 2,000 built in a first round at 1,000 nodes)."""

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


Entry = TypeVar("Entry", WaitingEntry, RunningEntry)
_STATUS = attrgetter("status")
_ID = attrgetter("id")


class EntryCache(Generic[Entry]):
    """Entries by status object, and by job id for a new status object equal to the last one.

    Keyed by the status object's ``id``: an entry holds its status object, so a key is never
    another live object's. A caller without a status cache of its own hands the policy a new
    but equal object every round; such an object gets the job's last entry (``of``) instead
    of a new build. Entries of jobs gone are dropped once they outnumber the live ones
    (amortised O(1) a round)."""

    def __init__(self, miss: Entry) -> None:
        self._miss: Entry = miss  # an entry whose status is no job's
        self._by_object: dict[int, Entry] = {}
        self._by_job: dict[str, Entry] = {}

    def clear(self) -> None:
        self._by_object.clear()
        self._by_job.clear()

    def entries(
        self, statuses: Sequence[JobStatus], build: Callable[[JobStatus], Entry]
    ) -> list[Entry]:
        """Each status's entry, in order; ``build`` makes the missing ones."""
        by_object, by_job = self._by_object, self._by_job
        ids = list(map(id, statuses))
        if not by_job:  # a first round: every entry is built (10,000 at 1,000 nodes)
            built = list(map(build, statuses))
            by_object.update(zip(ids, built, strict=True))
            by_job.update(zip(map(_ID, statuses), built, strict=True))
            return built
        # dict.get with a default never gives None (map hides that from the checker)
        out = cast("list[Entry]", list(map(by_object.get, ids, repeat(self._miss))))
        # C-level loops: most statuses are the objects seen last round
        for i in compress(range(len(out)), map(is_not, map(_STATUS, out), statuses)):
            job = statuses[i]
            entry = by_job.get(job.id)
            entry = entry.of(job) if entry is not None and entry.status == job else build(job)
            out[i] = by_object[ids[i]] = by_job[job.id] = entry
        live = 2 * len(out) + 64
        if len(by_object) > live:
            by_object.clear()
            by_object.update(zip(ids, out, strict=True))
        if len(by_job) > live:
            by_job.clear()
            by_job.update((entry.status.id, entry) for entry in out)
        return out
