"""What the ``fgd`` and ``danlu`` placement strategies keep across a policy's rounds.

Both strategies measure fragmentation against the typical pods: the request shapes of the
jobs in the view (pending and running). A :class:`~danlu.sched.placement.gang.FreeMap`
lives for one round, so on its own it counts the shapes of every job again each round
(12,000 jobs in the at-scale benchmark) and, for ``danlu``, builds a new
:class:`~danlu.sched.placement.share_mirror.ShareMirror` whose scorer caches start empty:
every share size scores its few hundred candidate GPUs afresh, though a round changes a
handful of nodes.

A :class:`PackingMemo` (one per policy object, handed to each round's free map) keeps:

* the shape counts, updated from the jobs that came or went since the last round (jobs
  are matched by their status objects, which adapters keep for unchanged jobs, as the
  policies' other caches rely on);
* the typical pods in effect, rebuilt only when the jobs' shape distribution has moved
  from the one they were built from by more than ``refresh_drift`` in total variation
  distance (:data:`REFRESH_DRIFT`), or on another cluster;
* the ``danlu`` strategy's mirror and scorer, for as long as the cluster and the typical
  pods in effect are the same: the mirror takes the new round's free capacity and marks
  only the nodes that changed, so the scores of the others carry over.

A round placed with a memo is the round placed without one whenever the typical pods in
effect equal the view's own; otherwise they differ by at most the drift.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from danlu.core.cluster import MILLI_PER_GPU, Cluster
from danlu.core.errors import ConfigError
from danlu.sched.placement.frag import TypicalPods, typical_pods_counted
from danlu.sched.placement.share import BoolArray, IntArray, ShareRequest
from danlu.sched.placement.share_mirror import ShareMirror
from danlu.sched.view import ClusterView, JobRequest, JobStatus

REFRESH_DRIFT = 0.02
"""Total variation distance between the jobs' shape distribution now and the one the
typical pods in effect were built from, past which they are rebuilt. A round's churn
moves it by at most (jobs that came + jobs that went) / jobs: at 12,000 jobs and 40
changes a round, the typical pods last six rounds or more (about 30 in
``benchmarks/sched_latency.py --shared 0.3``, whose arrivals are drawn from the same
shapes); with 40 jobs, one job changes it by about 1/40 and they are rebuilt whenever a
job of another shape comes or goes."""

ShapeKey = tuple[bool, int, int, frozenset[str]]
"""What decides a job's shape: whether it shares a GPU, its milli-GPU, GPUs and types."""


def shape_key(req: JobRequest) -> ShapeKey:
    """The fields of ``req`` its :func:`share_shape` depends on."""
    return (req.shares_gpu, req.gpu_milli, req.gpus, req.gpu_types)


def asks_gpus(key: ShapeKey) -> bool:
    """Whether jobs of shape ``key`` ask for a GPU (or part of one). One asking for none
    never takes one: the placer places nothing for it (the server's admission refuses it,
    the simulator leaves CPU-only pods out of a GPU schedule)."""
    return key[2] > 0


def share_shape(req: JobRequest) -> ShareRequest:
    """A job's request in the shape the fragmentation measure counts (CPU is not modelled
    here: the whole-GPU placer tracks GPUs only). A share sized by memory alone counts as
    half a GPU; a request for no GPU is a CPU-only shape (no GPU, no milli-GPU)."""
    spec = frozenset(t.lower() for t in req.gpu_types)
    if req.gpus <= 0:
        return ShareRequest(cpu_milli=0, num_gpu=0, gpu_milli=0, gpu_spec=spec)
    if req.shares_gpu:
        milli = req.gpu_milli if req.gpu_milli < MILLI_PER_GPU else MILLI_PER_GPU // 2
        return ShareRequest(cpu_milli=0, num_gpu=1, gpu_milli=milli, gpu_spec=spec)
    return ShareRequest(cpu_milli=0, num_gpu=req.gpus, gpu_milli=MILLI_PER_GPU, gpu_spec=spec)


def typical_of(counts: Counter[ShapeKey], examples: dict[ShapeKey, JobRequest]) -> TypicalPods:
    """The typical pods of jobs counted by shape (``examples``: a request of each), those
    asking for no GPU left out (:func:`asks_gpus`): FGD would count every free GPU as a
    fragment for them, though they never take one. Raises :class:`ConfigError` when no
    shape asks for a GPU."""
    return typical_pods_counted(
        [(share_shape(examples[k]), n) for k, n in counts.items() if asks_gpus(k)]
    )


def _members(values: npt.NDArray[np.uint64], among: npt.NDArray[np.uint64]) -> BoolArray:
    """Which of ``values`` are in ``among`` (sorted, without repeats)."""
    at = np.searchsorted(among, values)
    inside = at < among.size
    found = np.zeros(values.size, np.bool_)
    found[inside] = among[at[inside]] == values[inside]
    return found


def drift(now: Counter[ShapeKey], then: Counter[ShapeKey]) -> float:
    """Total variation distance between two shape distributions given by counts (1.0 when
    either is empty)."""
    total_now, total_then = sum(now.values()), sum(then.values())
    if not total_now or not total_then:
        return 1.0
    keys = now.keys() | then.keys()
    return 0.5 * sum(abs(now[k] / total_now - then[k] / total_then) for k in keys)


class PackingMemo:
    """The typical pods and the ``danlu`` mirror kept across one policy's rounds (module
    docstring). A view of another cluster starts it afresh."""

    def __init__(self, refresh_drift: float = REFRESH_DRIFT) -> None:
        if not 0.0 <= refresh_drift <= 1.0:
            raise ConfigError(f"refresh_drift must be in [0, 1], got {refresh_drift!r}")
        self.refresh_drift = refresh_drift
        self._cluster: Cluster | None = None
        self._held: dict[int, tuple[JobStatus, ShapeKey]] = {}
        """``id(status)`` -> (the status, its shape key), for every job counted; the status
        is kept so that its ``id`` is not reused while it is here."""
        self._counts: Counter[ShapeKey] = Counter()
        self._ids: npt.NDArray[np.uint64] = np.zeros(0, np.uint64)
        """The ``id`` of every status in :attr:`_held`, sorted."""
        self._examples: dict[ShapeKey, JobRequest] = {}
        self._built_from: Counter[ShapeKey] = Counter()
        self._typical: TypicalPods | None = None
        self._mirror: ShareMirror | None = None
        self._mirror_typical: TypicalPods | None = None
        self.rebuilds = 0
        """How many times the typical pods were built (for tests and benchmarks)."""

    def _reset(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._held, self._counts, self._examples = {}, Counter(), {}
        self._ids = np.zeros(0, np.uint64)
        self._built_from = Counter()
        self._typical = self._mirror = self._mirror_typical = None

    def _count(self, view: ClusterView) -> None:
        """Count the view's jobs instead of the last round's: the jobs no longer there
        are taken off, the new ones added. The statuses are matched by ``id`` in sorted
        arrays (a set difference of 12,000 Python objects a round cost more than the rest
        of the memo)."""
        jobs = (*view.pending, *view.running)
        ids, first = np.unique(np.fromiter(map(id, jobs), np.uint64, len(jobs)), return_index=True)
        known = self._ids
        held, counts = self._held, self._counts
        for gone in known[~_members(known, ids)].tolist():
            key = held.pop(gone)[1]
            counts[key] -= 1
            if not counts[key]:
                del counts[key], self._examples[key]
        new = [jobs[i] for i in first[~_members(ids, known)].tolist()]
        requests = [job.request for job in new]
        keys = list(map(shape_key, requests))
        counts.update(keys)
        self._examples = {**dict(zip(keys, requests, strict=True)), **self._examples}
        held.update(zip(map(id, new), zip(new, keys, strict=True), strict=True))
        self._ids = ids

    def typical(self, view: ClusterView) -> TypicalPods | None:
        """The typical pods in effect for ``view``'s jobs (None when it has no job)."""
        if view.cluster is not self._cluster:
            self._reset(view.cluster)
        self._count(view)
        counts = self._counts
        if not any(map(asks_gpus, counts)):  # no job, or none asking for a GPU
            return None
        if self._typical is None or drift(counts, self._built_from) > self.refresh_drift:
            self._typical = typical_of(counts, self._examples)
            self._built_from = counts.copy()
            self.rebuilds += 1
        return self._typical

    def mirror(
        self, offsets: IntArray, sizes: IntArray, models: Sequence[str], typical: TypicalPods
    ) -> ShareMirror:
        """The ``danlu`` strategy's mirror over ``typical``: last round's while the typical
        pods are the same object (the caller then syncs it to the round's free capacity)."""
        if self._mirror is None or self._mirror_typical is not typical:
            self._mirror = ShareMirror(offsets, sizes, list(models), typical)
            self._mirror_typical = typical
        return self._mirror
