"""Jobs kept in rank order from one scheduling round to the next.

Ranking every queued job again each round costs a Python call per job: ~10 ms for a queue of
10,000, the whole budget of a round. Between two rounds few jobs change, so :class:`RankedJobs`
keeps the previous round's order and only removes the jobs that left and inserts the ones that
came. A job is identified by its :class:`~danlu.sched.view.JobStatus` *object*: adapters hand
the same object back while nothing about the job changed (a new object is simply a leaving
job plus a coming one), so the cache never needs to look inside a status to know it is stale.

A policy's key for a job may also change with the clock at known instants (a Tiresias
demotion, a starvation promotion): the key function returns the key and the time until which
it holds, and the order is rebuilt once the earliest of those passes.

The result is exactly the order a fresh sort would give, provided keys are unique (end them
with the job's ``seq`` and id) and the key function depends only on the status object and the
time. Policies hold one ``RankedJobs`` per ordering as a private, non-compared field: a
transparent cache, so a policy stays a deterministic function of the view.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Sequence
from typing import Any

from danlu.core.cluster import Cluster
from danlu.sched.view import JobStatus

RankKey = tuple[Any, ...]
"""A unique, totally ordered sort key (lowest first)."""

KeyFunction = Callable[[JobStatus, float], tuple[RankKey, float]]
"""``(job, now) -> (key, valid_until)``: the job's key at ``now`` and the first time it may
differ (``math.inf`` when it depends on the status alone)."""

_INCREMENTAL_SHARE = 4
"""Re-sort from scratch when more than 1/4 of the jobs changed (or fewer than 64 are kept)."""


class RankedJobs:
    """A set of jobs sorted by a key, updated incrementally; see the module docstring.

    ``by_seq=True`` is for sets handed over in ascending ``request.seq`` (a view's pending
    jobs): what changed is then found by comparing the previous and the new sequence range by
    range, in time proportional to the changes rather than to the set (see :func:`seq_diff`).
    Otherwise every update compares the two sets of status objects (C-speed, but linear).
    """

    def __init__(self, by_seq: bool = False) -> None:
        self._by_seq = by_seq
        self._keys: list[RankKey] = []
        self._jobs: list[JobStatus] = []
        self._entries: dict[int, tuple[JobStatus, RankKey, float]] = {}
        """Identity (``request.seq`` with ``by_seq``, else ``id(status)``) -> (status, key,
        valid until). Holding the status keeps its id from being reused while it is here."""
        self._source: Sequence[JobStatus] | None = None
        self._time = -math.inf
        self._last_diff: tuple[object, object, list[JobStatus], list[JobStatus]] = (
            None,
            None,
            [],
            [],
        )
        """(previous set, new set, gone, came) of the last comparison (see ``like``)."""
        self._expiries: list[tuple[float, int]] = []
        """A heap of (valid until, identity) for keys that expire; entries of jobs that left
        (or were re-keyed) are dropped when they reach the top."""

    def _ident(self, job: JobStatus) -> int:
        return job.request.seq if self._by_seq else id(job)

    @property
    def jobs(self) -> list[JobStatus]:
        """The jobs, best-ranked first (do not modify)."""
        return self._jobs

    @property
    def keys(self) -> list[RankKey]:
        """Their keys, ascending, parallel to :attr:`jobs` (do not modify)."""
        return self._keys

    @property
    def expiry(self) -> float:
        """The earliest time at which some job's key may change."""
        heap, entries = self._expiries, self._entries
        while heap:
            until, ident = heap[0]
            entry = entries.get(ident)
            if entry is not None and entry[2] == until:
                return until
            heapq.heappop(heap)
        return math.inf

    def forget(self) -> None:
        """Rank from scratch at the next :meth:`update`: for a key function whose keys
        changed for the same status objects (one that reads the cluster's GPU sizes, when
        they changed)."""
        self._source = None
        self._last_diff = (None, None, [], [])

    def key_of(self, job: JobStatus) -> RankKey:
        """The key of a job of the current set."""
        return self._entries[self._ident(job)][1]

    def update(
        self,
        jobs: Sequence[JobStatus],
        now: float,
        key: KeyFunction,
        like: RankedJobs | None = None,
    ) -> RankedJobs:
        """Make the set ``jobs`` ranked at ``now``; returns ``self``.

        ``key`` must be the same function (same policy configuration) on every call.
        ``like``: another ``by_seq`` order over the same jobs, already updated to ``jobs``;
        when it came from the same previous set, its comparison is reused.
        """
        if self._by_seq and not isinstance(jobs, tuple):
            jobs = tuple(jobs)  # seq_diff compares slices: both sides must be tuples
        source = self._source
        if jobs is source and self._time <= now < self.expiry:
            self._time = now
            return self
        if source is None or now < self._time:  # the clock went back: keys may not hold
            self._rebuild(jobs, now, key)
            return self
        if self._by_seq:
            last = like._last_diff if like is not None else None
            if last is not None and last[0] is source and last[1] is jobs:
                gone_jobs, came_jobs = last[2], last[3]
            elif not _shares_objects(source, jobs):
                # New status objects throughout (an adapter that rebuilds every status):
                # comparing them by value would cost more than sorting again.
                self._rebuild(jobs, now, key)
                return self
            else:
                gone_jobs, came_jobs = seq_diff(source, jobs)
                self._last_diff = (source, jobs, gone_jobs, came_jobs)
            gone = {job.request.seq for job in gone_jobs}
            came = {job.request.seq: job for job in came_jobs}
        else:
            current = dict(zip(map(id, jobs), jobs, strict=True))
            gone = self._entries.keys() - current.keys()
            came = {i: current[i] for i in current.keys() - self._entries.keys()}
        while self.expiry <= now:  # re-key the jobs whose key stopped holding
            _, ident = heapq.heappop(self._expiries)
            if ident not in gone:
                gone.add(ident)
                came.setdefault(ident, self._entries[ident][0])
        changed = len(gone) + len(came)
        if changed * _INCREMENTAL_SHARE > len(jobs) or (changed and len(jobs) < 64):
            self._rebuild(jobs, now, key)
            return self
        if changed:
            self._remove(gone)
            for ident in sorted(came):  # any order gives the same result; sorted is tidy
                self._insert(ident, came[ident], now, key)
        if len(self._entries) != len(jobs):  # a seq came twice: see :meth:`_rebuild`
            self._rebuild(jobs, now, key)
            return self
        self._source = jobs
        self._time = now
        return self

    def _rebuild(self, jobs: Sequence[JobStatus], now: float, key: KeyFunction) -> None:
        ident = self._ident
        entries = {ident(job): (job, *key(job, now)) for job in jobs}
        if len(entries) < len(jobs) and self._by_seq:
            # Jobs sharing a ``seq`` (an adapter that does not number its jobs: JobRequest's
            # default is 0) would share one entry, and all but one of them would drop out of
            # the order, neither started nor said to wait. Such a set is told apart by its
            # status objects from now on (the order is the same: keys end with the id).
            self._by_seq = False
            self._last_diff = (None, None, [], [])
            ident = self._ident
            entries = {ident(job): (job, *key(job, now)) for job in jobs}
        ordered = sorted(entries.values(), key=_entry_key)
        self._entries = entries
        self._keys = [entry[1] for entry in ordered]
        self._jobs = [entry[0] for entry in ordered]
        self._expiries = [(entry[2], i) for i, entry in entries.items() if entry[2] < math.inf]
        heapq.heapify(self._expiries)
        self._source = jobs
        self._time = now

    def _remove(self, gone: set[int]) -> None:
        for ident in gone:
            job, key, _ = self._entries.pop(ident)
            index = bisect.bisect_left(self._keys, key)
            if index >= len(self._jobs) or self._jobs[index] is not job:
                raise ValueError(f"rank keys are not unique (job {job.id}, key {key})")
            del self._keys[index]
            del self._jobs[index]

    def _insert(self, ident: int, job: JobStatus, now: float, key: KeyFunction) -> None:
        rank_key, until = key(job, now)
        index = bisect.bisect_left(self._keys, rank_key)
        if index < len(self._keys) and self._keys[index] == rank_key:
            raise ValueError(f"rank keys are not unique (job {job.id}, key {rank_key})")
        self._keys.insert(index, rank_key)
        self._jobs.insert(index, job)
        self._entries[ident] = (job, rank_key, until)
        if until < math.inf:
            heapq.heappush(self._expiries, (until, ident))


def ranked_pending() -> RankedJobs:
    """A :class:`RankedJobs` for a view's pending jobs (which come in ``seq`` order)."""
    return RankedJobs(by_seq=True)


def forget_on_new_sizes(order: RankedJobs, seen: list[object], cluster: Cluster) -> None:
    """Make ``order`` rank from scratch when ``cluster``'s GPU types and memory sizes differ
    from those in ``seen`` (a one-item holder the policy keeps, updated here): for keys that
    read them (a share sized by memory is ranked by its part of the largest GPU of its
    types, :func:`~danlu.sched.share_size.ranked_gpus`)."""
    sizes = cluster.gpus_by_type
    if seen != [sizes]:
        order.forget()
        seen[:] = [sizes]


SizedKeyFunction = Callable[[JobStatus, float, Cluster | None], tuple[RankKey, float]]
"""``(job, now, cluster) -> (key, valid_until)``: a :data:`KeyFunction` that also reads the
cluster's GPU sizes (a policy's ``rank_key``)."""


def key_on_cluster(
    order: RankedJobs, seen: list[object], cluster: Cluster, rank_key: SizedKeyFunction
) -> KeyFunction:
    """``rank_key`` bound to ``cluster``: the key function a round ranks ``order`` by, once
    ``order`` forgot its ranks if the cluster's GPU sizes changed since ``seen``
    (:func:`forget_on_new_sizes`)."""
    forget_on_new_sizes(order, seen, cluster)

    def key(job: JobStatus, now: float) -> tuple[RankKey, float]:
        return rank_key(job, now, cluster)

    return key


def _entry_key(entry: tuple[JobStatus, RankKey, float]) -> RankKey:
    return entry[1]


def _seq(job: JobStatus) -> int:
    return job.request.seq


_SMALL_RANGE = 32


def _shares_objects(old: Sequence[JobStatus], new: Sequence[JobStatus]) -> bool:
    """Whether some of ``new`` (probed at its start, middle and end) are the very status
    objects of ``old`` with the same ``seq``. Both in ascending ``seq``."""
    if not old or not new:
        return True  # nothing to compare by value
    for probe in (new[0], new[len(new) // 2], new[-1]):
        index = bisect.bisect_left(old, probe.request.seq, key=_seq)
        if index < len(old) and old[index] is probe:
            return True
    return False


def seq_diff(
    old: Sequence[JobStatus], new: Sequence[JobStatus]
) -> tuple[list[JobStatus], list[JobStatus]]:
    """The jobs of ``old`` that are not in ``new`` and those of ``new`` not in ``old``.

    Both must be in ascending ``request.seq``; a job whose status object changed is in both
    lists. Ranges are halved by ``seq`` until they compare equal (a C-speed comparison that
    returns at once for the same objects) or are small: the cost grows with the changes times
    the logarithm of the length, plus C-speed copying.
    """
    gone: list[JobStatus] = []
    came: list[JobStatus] = []
    stack = [(0, len(old), 0, len(new))]
    while stack:
        a, b, c, d = stack.pop()
        if b - a == d - c and old[a:b] == new[c:d]:
            continue
        if (b - a) + (d - c) <= _SMALL_RANGE:
            before = {job.request.seq: job for job in old[a:b]}
            after = {job.request.seq: job for job in new[c:d]}
            for seq, job in before.items():
                other = after.get(seq)
                if other is None or (other is not job and other != job):
                    gone.append(job)
            for seq, job in after.items():
                other = before.get(seq)
                if other is None or (other is not job and other != job):
                    came.append(job)
            continue
        pivot = old[(a + b) // 2] if b - a >= d - c else new[(c + d) // 2]
        seq = pivot.request.seq
        split_old = bisect.bisect_left(old, seq, a, b, key=_seq)
        split_new = bisect.bisect_left(new, seq, c, d, key=_seq)
        stack.append((split_old, b, split_new, d))
        stack.append((a, split_old, c, split_new))
    return gone, came
