"""GPU sharing in the ``danlu`` policy: memory-fit plus an interference rule.

A job asking for part of one GPU (by milli-GPU or by memory) may be put on a GPU another job
already uses only when (1) their predicted peak memories fit the GPU (the request's
``gpu_memory``, from the memory model, against the GPU's free memory -- :class:`FreeMap`
checks it) and (2) the interference model predicts that co-location is a gain with every
job already there: the combined normalised throughput of the pair (each job's throughput
when sharing divided by its throughput alone, summed) must reach ``1 + min_gain``; a GPU
where some pair would lose is closed to the job, which goes to another GPU or an empty one,
or waits.

The model is calibrated on Gavel's measurements (OSDI'20,
``../shared/data/gavel/physical_cluster_throughputs.json``), over the V100 pairs where both
jobs ran. Its prediction for two jobs whose model families (``training.family``,
:data:`~danlu.core.spec.MODEL_FAMILIES`) are known is the median of the pairs of those two
families, :data:`PAIR_GAINS` (:func:`calibrate_pairs` recomputes it from the file). They
differ widely: two small CNNs gain 77 %, two recommendation models lose 95 %, and a large
CNN loses beside anything but a small CNN. When either family is unknown, the prediction is
the median over all pairs, :data:`PAIR_GAIN` (:func:`calibrate`), a gain of about 9 %: with
the default ``min_gain`` (5 %) such jobs share.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Collection, Hashable, Iterable, Iterator, Mapping
from operator import attrgetter
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster
from danlu.estimate.colocation import gavel_family, measured_pairs, share_medians
from danlu.sched.placement.gang import FreeMap
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies.danlu_hosts import FamilyHosts, gpu_indices
from danlu.sched.view import ClusterView, JobStatus, Plan, Start

PAIR_GAIN = 1.0919
"""Median combined normalised throughput of two jobs sharing a V100 (Gavel measurements):
the prediction for a pair with a job of unknown family."""

PAIR_GAINS: dict[tuple[str, str], float] = {
    ("cnn-large", "cnn-large"): 0.7009,
    ("cnn-large", "cnn-small"): 1.3054,
    ("cnn-large", "gan"): 0.7433,
    ("cnn-large", "lstm"): 0.8446,
    ("cnn-large", "recommendation"): 0.5175,
    ("cnn-large", "rl"): 0.6554,
    ("cnn-large", "transformer"): 0.7394,
    ("cnn-small", "cnn-small"): 1.7705,
    ("cnn-small", "gan"): 1.4025,
    ("cnn-small", "lstm"): 1.6509,
    ("cnn-small", "recommendation"): 1.0553,
    ("cnn-small", "rl"): 1.7161,
    ("cnn-small", "transformer"): 1.3020,
    ("gan", "gan"): 1.1679,
    ("gan", "lstm"): 1.2111,
    ("gan", "recommendation"): 0.4883,
    ("gan", "rl"): 1.2779,
    ("gan", "transformer"): 1.3884,
    ("lstm", "lstm"): 1.1900,
    ("lstm", "recommendation"): 0.8309,
    ("lstm", "rl"): 1.0494,
    ("lstm", "transformer"): 1.4073,
    ("recommendation", "recommendation"): 0.0524,
    ("recommendation", "rl"): 0.7287,
    ("recommendation", "transformer"): 0.7875,
    ("rl", "rl"): 0.9779,
    ("rl", "transformer"): 1.5316,
    ("transformer", "transformer"): 1.5671,
}
"""Median combined normalised throughput of two jobs sharing a V100, by the families of the
pair (sorted), over Gavel's measurements of every batch size and scale of those models
(between 1 and 50 pairs each: ``gan``/``gan`` and ``rl``/``rl`` rest on one)."""

PAIR_SHARES: dict[tuple[str, str], float] = {
    ("cnn-large", "cnn-large"): 0.3861,
    ("cnn-large", "cnn-small"): 0.7473,
    ("cnn-large", "gan"): 0.4949,
    ("cnn-large", "lstm"): 0.4247,
    ("cnn-large", "recommendation"): 0.4959,
    ("cnn-large", "rl"): 0.4666,
    ("cnn-large", "transformer"): 0.4745,
    ("cnn-small", "cnn-large"): 0.5964,
    ("cnn-small", "cnn-small"): 0.8620,
    ("cnn-small", "gan"): 0.8740,
    ("cnn-small", "lstm"): 1.0000,
    ("cnn-small", "recommendation"): 1.0000,
    ("cnn-small", "rl"): 1.0000,
    ("cnn-small", "transformer"): 0.8044,
    ("gan", "cnn-large"): 0.2370,
    ("gan", "cnn-small"): 0.5286,
    ("gan", "gan"): 0.5839,
    ("gan", "lstm"): 0.6776,
    ("gan", "recommendation"): 0.4663,
    ("gan", "rl"): 0.6680,
    ("gan", "transformer"): 0.7111,
    ("lstm", "cnn-large"): 0.4063,
    ("lstm", "cnn-small"): 0.6509,
    ("lstm", "gan"): 0.5842,
    ("lstm", "lstm"): 0.6118,
    ("lstm", "recommendation"): 0.7645,
    ("lstm", "rl"): 0.6324,
    ("lstm", "transformer"): 0.7325,
    ("recommendation", "cnn-large"): 0.0149,
    ("recommendation", "cnn-small"): 0.0738,
    ("recommendation", "gan"): 0.0264,
    ("recommendation", "lstm"): 0.0630,
    ("recommendation", "recommendation"): 0.0260,
    ("recommendation", "rl"): 0.0847,
    ("recommendation", "transformer"): 0.0606,
    ("rl", "cnn-large"): 0.1888,
    ("rl", "cnn-small"): 0.7161,
    ("rl", "gan"): 0.6099,
    ("rl", "lstm"): 0.4806,
    ("rl", "recommendation"): 0.6231,
    ("rl", "rl"): 0.4890,
    ("rl", "transformer"): 0.8289,
    ("transformer", "cnn-large"): 0.2142,
    ("transformer", "cnn-small"): 0.5442,
    ("transformer", "gan"): 0.6856,
    ("transformer", "lstm"): 0.7975,
    ("transformer", "recommendation"): 0.7319,
    ("transformer", "rl"): 0.8222,
    ("transformer", "transformer"): 0.8206,
}
"""Median of one job's throughput beside the other over its throughput alone (capped at 1),
by the ordered pair of families (job's, other's), over Gavel's measurements
(:func:`calibrate_shares` recomputes it): what each job of a pair keeps of its own speed.
The combined gains of :data:`PAIR_GAINS` hide how it is split: beside a small CNN a
recommendation model keeps 7 % while the CNN keeps all of its speed."""

PAIR_SHARE = 0.6003
"""Median of every measured job's share: the prediction for a pair with a job of unknown
family."""

MIN_GAIN = 0.05
"""Predicted gain co-location must reach (fraction of one GPU's work)."""


def co_located(path: str | Path, gpu: str = "v100") -> Iterator[tuple[str, str, float]]:
    """Every measured pair of Gavel's ``physical_cluster_throughputs.json`` on ``gpu`` where
    both jobs made progress (:func:`~danlu.estimate.colocation.measured_pairs`): (job, other
    job, combined normalised throughput), as the file lists them."""
    for pair in measured_pairs(path, gpu):
        yield pair.job, pair.other, pair.combined


def calibrate(path: str | Path, gpu: str = "v100") -> tuple[float, float]:
    """(median combined normalised throughput, fraction of pairs that lose) over the pairs
    of :func:`co_located`."""
    combined = [gain for _, _, gain in co_located(path, gpu)]
    if not combined:
        raise ValueError(f"no co-located pairs for {gpu} in {path}")
    return statistics.median(combined), sum(c < 1.0 for c in combined) / len(combined)


def calibrate_pairs(path: str | Path, gpu: str = "v100") -> dict[tuple[str, str], float]:
    """The median combined normalised throughput by pair of families (sorted) over the
    pairs of :func:`co_located`."""
    combined: dict[tuple[str, str], list[float]] = {}
    for name_a, name_b, gain in co_located(path, gpu):
        a, b = sorted((gavel_family(name_a), gavel_family(name_b)))
        combined.setdefault((a, b), []).append(gain)
    return {pair: statistics.median(values) for pair, values in sorted(combined.items())}


def calibrate_shares(
    path: str | Path, gpu: str = "v100"
) -> tuple[dict[tuple[str, str], float], float]:
    """(:data:`PAIR_SHARES`, :data:`PAIR_SHARE`) recomputed from Gavel's file."""
    medians = share_medians(path, gpu)
    return medians.by_family, medians.overall


def pair_share(family: str, other: str) -> float:
    """What a ``family`` job keeps of its speed beside an ``other`` job (predicted;
    :data:`PAIR_SHARE` when either family is unknown or empty)."""
    return PAIR_SHARES.get((family, other), PAIR_SHARE)


def pair_gain(family_a: str, family_b: str) -> float:
    """The predicted combined normalised throughput of two jobs of these families sharing a
    GPU (:data:`PAIR_GAIN` when either is unknown or empty)."""
    key = (family_a, family_b) if family_a <= family_b else (family_b, family_a)
    return PAIR_GAINS.get(key, PAIR_GAIN)


def sharing_pays(min_gain: float = MIN_GAIN, pair_gain: float = PAIR_GAIN) -> bool:
    """Whether the interference model predicts that co-locating two jobs is a gain."""
    return pair_gain >= 1.0 + min_gain


def gpus_unavailable(jobs: Iterable[JobStatus], view: ClusterView) -> int:
    """The distinct GPUs the allocations of ``jobs`` touch and those closed to new work
    (:meth:`~danlu.sched.view.ClusterView.open_gpus`; a GPU holding several shares, or closed
    and held, counts once)."""
    offset = view.cluster.gpu_offset
    held = {offset(share.node) + share.gpu for job in jobs for share in job.allocation.shares}
    opened = view.open_gpus()
    if opened is not None:
        held.update(np.flatnonzero(~opened).tolist())
    return len(held)


def carry_out(free: FreeMap, plan: Plan, running: Mapping[str, JobStatus]) -> None:
    """Apply ``plan``'s preempts, resizes and starts to ``free`` (``running``: the running
    jobs it preempts or resizes, by id): what is free once it is carried out."""
    for p in plan.preempts:
        free.release(running[p.job_id].allocation)
    for r in plan.resizes:
        free.release(running[r.job_id].allocation)
    for r in plan.resizes:
        free.take(r.allocation)
    for s in plan.starts:
        free.take(s.allocation)


def place_shared(
    view: ClusterView,
    jobs: list[JobStatus],
    plan: Plan,
    placement: str,
    min_gain: float = MIN_GAIN,
    spread: bool = False,
    min_rate: float = 0.0,
    *,
    hosts: FamilyHosts,
    whole_waiting: bool,
    first: Collection[str] = (),
    memo: PackingMemo | None = None,
) -> Plan:
    """``plan`` with starts added for the pending shared requests ``jobs`` (in submission
    order, as the view's pending jobs are) on the capacity it leaves, in queue order
    (priority first, then submission): each on a GPU where its memory fits and the
    interference model predicts a gain beside every job already there (those of ``plan``
    included), and waiting reasons for those it could not place. ``spread``: while no
    whole-GPU job is left waiting, a request goes on a free GPU of its own first.
    ``min_rate``: a GPU is also closed where the request, or a job there, is predicted to
    keep less than this share of its speed (:func:`pair_share`). ``hosts``: where the
    running jobs of each family sit, kept across rounds (the caller's, one per policy).
    ``whole_waiting``: whether a whole-GPU job is left waiting
    after ``plan`` (the caller knows its whole-GPU jobs). ``first``: the requests (by id)
    placed before all others (those the starvation rule promoted). ``memo``: what the
    ``fgd`` and ``danlu`` placements keep across rounds (the caller's, one per policy)."""
    if not jobs:
        return plan
    free = FreeMap(view, placement, memo)
    cluster = view.cluster
    moving = {p.job_id for p in plan.preempts} | {r.job_id for r in plan.resizes}
    running = {j.id: j for j in view.running if j.id in moving} if moving else {}
    carry_out(free, plan, running)
    # where the jobs of each family sit once the plan is carried out (GPU index masks)
    leaving = [running[p.job_id] for p in plan.preempts]
    leaving += [running[r.job_id] for r in plan.resizes]
    starting = {s.job_id for s in plan.starts}
    family_of = {j.id: j.request.family for j in view.pending if j.id in starting}
    placed = [(running[r.job_id].request.family, r.allocation) for r in plan.resizes]
    placed += [(family_of.get(s.job_id, ""), s.allocation) for s in plan.starts]
    hosts.update(cluster, view.running)
    masks = hosts.masks(leaving, placed)
    starts: list[Start] = []
    # with no whole-GPU job left waiting, a share goes on a GPU of its own while one is free
    spread = spread and not whole_waiting
    closures = _Closures(masks, min_gain, min_rate)
    # priority first; ties keep the submission order the jobs come in (a stable sort)
    ordered = sorted(jobs, key=_PRIORITY, reverse=True)
    if first:
        ordered = [j for j in ordered if j.id in first] + [j for j in ordered if j.id not in first]
    failed = _Failures(ordered)
    own, beside = failed.own, failed.beside
    count = len(ordered)
    # from which turn on a family's requests wait beside jobs they would lose with (its
    # closed GPUs, once there, stay: the reason a request gets is its turn's)
    beside_from = {
        family: 0 if closures.closed(family) is not None else count for family in failed.families
    }
    i = failed.next_try(0, spread)
    while i < count:
        job = ordered[i]
        request, family = job.request, job.request.family
        closed = closures.closed(family)
        alloc = None
        if spread and not own[i]:
            alloc = free.place(request, closed=free.free_milli < MILLI_PER_GPU)
            if alloc is None:
                failed.add(i, own=True)
        if alloc is None and not beside[i]:
            alloc = free.place(request, closed=closed)
            if alloc is None:
                failed.add(i, own=False)
        if alloc is not None:
            failed.started[i] = True
            starts.append(Start(job.id, alloc, reason=_beside(masks, family, alloc, cluster)))
            closures.placed(family, alloc, cluster)
            for other, turn in beside_from.items():
                if turn == count and closures.closed(other) is not None:
                    beside_from[other] = i + 1
        i = failed.next_try(i + 1, spread)
    waiting = failed.reasons(ordered, beside_from)
    return dataclasses.replace(
        plan, starts=plan.starts + tuple(starts), waiting={**plan.waiting, **waiting}
    )


NO_ROOM = "no GPU has room for its predicted peak memory and share"
NO_ROOM_BESIDE = (
    "no GPU has room for its predicted peak memory and share beside jobs the interference "
    "model predicts it gains with"
)
_PRIORITY = attrgetter("request.priority")


def _beside(
    hosts: dict[str, npt.NDArray[np.bool_]], family: str, alloc: Allocation, cluster: Cluster
) -> str:
    """What a share placed on ``alloc`` sits beside, and what it is predicted to keep of
    its speed there (the start's reason in the job's event log)."""
    share = alloc.shares[0]
    index = cluster.gpu_offset(share.node) + share.gpu
    others = sorted(f for f, mask in hosts.items() if mask[index])
    if not others:
        return "a GPU of its own"
    keeps = 1.0
    for other in others:
        keeps *= pair_share(family, other)
    names = ", ".join(f or "unknown-family" for f in others)
    return (
        f"sharing a GPU with {names} jobs; predicted to keep {keeps:.0%} of its speed "
        f"({family or 'unknown family'})"
    )


class _Closures:
    """The GPUs closed to a shared request of each family (those beside a job it would lose
    with), kept up to date as :func:`place_shared` places requests: each mask is built once
    and only gains the GPUs of the jobs placed after it, until a family new on the cluster
    appears (then all are rebuilt)."""

    def __init__(
        self, hosts: dict[str, npt.NDArray[np.bool_]], min_gain: float, min_rate: float
    ) -> None:
        self._hosts = hosts
        self._min_gain = min_gain
        self._min_rate = min_rate
        self._masks: dict[str, npt.NDArray[np.bool_] | None] = {}
        self._losers: dict[str, set[str]] = {}

    def _loses(self, family: str, other: str) -> bool:
        if not sharing_pays(self._min_gain, pair_gain(family, other)):
            return True
        return min(pair_share(family, other), pair_share(other, family)) < self._min_rate

    def closed(self, family: str) -> npt.NDArray[np.bool_] | None:
        """GPUs a ``family`` request may not go on (``None``: none)."""
        if family not in self._masks:
            losers = {f for f in self._hosts if self._loses(family, f)}
            self._losers[family] = losers
            masks = [self._hosts[f] for f in losers]
            self._masks[family] = np.logical_or.reduce(masks).copy() if masks else None
        return self._masks[family]

    def placed(self, family: str, alloc: Allocation, cluster: Cluster) -> None:
        """A ``family`` request was placed on ``alloc``."""
        new = family not in self._hosts
        _mark(self._hosts, family, alloc, cluster)
        if new:
            self._masks.clear()
            return
        for other, mask in list(self._masks.items()):
            if family not in self._losers[other]:
                continue
            if mask is None:
                self._masks[other] = mask = np.zeros(cluster.total_gpus, dtype=bool)
            mask[gpu_indices(alloc, cluster)] = True


class _Failures:
    """The shared requests of one :func:`place_shared` call (in the order it tries them)
    known to fail. Within one call the free capacity only shrinks and the closed GPUs only
    grow, so a request at least as large as one that failed (same family, same kind of
    share, same GPU types) fails too: when one fails, every later such request is marked at
    once (array operations), and the call skips them without trying.

    :attr:`own`: fails on a GPU of its own (any family); :attr:`beside`: fails on the GPUs
    open to its family."""

    def __init__(self, jobs: list[JobStatus]) -> None:
        count = len(jobs)
        requests = list(map(_REQUEST, jobs))
        self._memory = np.fromiter(map(_MEMORY, requests), np.int64, count)
        self._milli = np.fromiter(map(_MILLI, requests), np.int64, count)
        by_milli = (self._milli < MILLI_PER_GPU) | (self._memory == 0)
        distinct_types, type_codes = _numbered(list(map(_TYPES, requests)))
        types = max(len(distinct_types), 1)
        self.families, self._family_codes = _numbered(list(map(_FAMILY, requests)))
        """The distinct families, and each request's number among them."""
        kind = by_milli.astype(np.int64) * types + type_codes
        self._codes = {True: kind, False: self._family_codes * (2 * types) + kind}
        self._members: dict[tuple[bool, int], npt.NDArray[np.int64]] = {}
        self.own: npt.NDArray[np.bool_] = np.zeros(count, dtype=bool)
        self.beside: npt.NDArray[np.bool_] = np.zeros(count, dtype=bool)
        self.started: npt.NDArray[np.bool_] = np.zeros(count, dtype=bool)
        """Requests placed (the caller marks them)."""

    def next_try(self, start: int, spread: bool) -> int:
        """The first request from ``start`` on not known to fail every search it would get
        (on a GPU of its own when ``spread``, then beside others); the count when none."""
        skip = self.beside[start:]
        if spread:
            skip = skip & self.own[start:]
        if not skip.size:
            return start
        first = int(np.argmin(skip))
        return start + first if not skip[first] else start + skip.size

    def reasons(self, jobs: list[JobStatus], beside_from: dict[str, int]) -> dict[str, str]:
        """Why each request not started waits: :data:`NO_ROOM_BESIDE` for a request of a
        family from its turn ``beside_from[family]`` on, else :data:`NO_ROOM`."""
        turns = np.array([beside_from[f] for f in self.families], dtype=np.int64)
        late = np.arange(len(jobs)) >= turns[self._family_codes]
        left = np.flatnonzero(~self.started).tolist()
        texts = (NO_ROOM, NO_ROOM_BESIDE)
        return dict(
            zip(
                map(_ID, map(jobs.__getitem__, left)),
                map(texts.__getitem__, late[left].tolist()),
                strict=True,
            )
        )

    def add(self, index: int, *, own: bool) -> None:
        """Request ``index`` failed (``own``: on a GPU of its own): mark the later requests
        of its key that are at least as large."""
        codes = self._codes[own]
        key = (own, int(codes[index]))
        members = self._members.get(key)
        if members is None:
            members = self._members[key] = np.flatnonzero(codes == codes[index])
        later = members[np.searchsorted(members, index, side="right") :]
        memory, milli = self._memory, self._milli
        larger = later[(memory[later] >= memory[index]) & (milli[later] >= milli[index])]
        (self.own if own else self.beside)[larger] = True


T = TypeVar("T", bound=Hashable)


def _numbered(values: list[T]) -> tuple[list[T], npt.NDArray[np.int64]]:
    """The distinct ``values`` in first-seen order, and each value's index among them."""
    distinct = list(dict.fromkeys(values))
    number = {value: i for i, value in enumerate(distinct)}
    return distinct, np.fromiter(map(number.__getitem__, values), np.int64, len(values))


_REQUEST = attrgetter("request")
_ID = attrgetter("id")
_MEMORY = attrgetter("gpu_memory")
_MILLI = attrgetter("gpu_milli")
_TYPES = attrgetter("gpu_types")
_FAMILY = attrgetter("family")


def _mark(
    hosts: dict[str, npt.NDArray[np.bool_]], family: str, alloc: Allocation, cluster: Cluster
) -> None:
    """Record that a job of ``family`` sits on the GPUs of ``alloc``."""
    mask = hosts.get(family)
    if mask is None:
        mask = hosts[family] = np.zeros(cluster.total_gpus, dtype=bool)
    mask[gpu_indices(alloc, cluster)] = True
