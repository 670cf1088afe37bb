"""danlu's packing scorer for fractional and memory-sized GPU requests.

FGD (ATC'23) places a request where a node's expected fragmentation against the typical
pod shapes grows least, where a class's fragment is the free GPU capacity that ONE more
pod of the class could not use. That test misses two kinds of waste that decide the
allocation ratio of a nearly full cluster:

* capacity stranded by CPU or host memory: a CPU-only pod that leaves a 96-core, 8-GPU
  node with 80 cores still "fits" one more 12-core GPU pod, but not eight of them;
* remainders that no whole number of pods fills: a 470-pod on an empty GPU leaves 530,
  which fits one more 470-pod and then 60 that nothing typical uses.

danlu scores a candidate placement by the drop of two expected fragmentations:

``score = fill_drop + fgd_weight * fgd_drop``

``fgd_drop`` is FGD's measure, un-quantised; ``fill_drop`` is the fill fragmentation of
:mod:`danlu.sched.placement.danlu_pack_fill` (how much of the free capacity pods of each
typical class could fill, counting GPUs, CPU and memory; the class memory is the median
of its requests). FGD's measure dominates (``fgd_weight`` = :data:`FGD_WEIGHT`); the
fill measure decides among placements FGD sees as (nearly) equal and stops it from
stranding CPU-starved GPUs. Scores are rounded to 1e-6 milli-GPU so that equal scores
tie exactly; ties go to the lowest node rank (the experiment's seeded node order). A
share goes to the GPU of the chosen node with the best score (ties: the GPU with the
least free capacity, then the lowest index). Deterministic; no state beyond caches.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from danlu.sched.placement.danlu_pack_fill import FillFragmentation
from danlu.sched.placement.frag import FgdScorer, TypicalPods
from danlu.sched.placement.share import (
    FloatArray,
    IntArray,
    ShareCluster,
    ShareRequest,
    ShareScorer,
)

FGD_WEIGHT = 12.0
"""Weight of FGD's fragmentation drop against the fill-fragmentation drop (both in
milli-GPU). Chosen once on the default openb pod list, seeds 42-45 (allocation ratio:
8 -> 95.53 %, 12 -> 95.63, 16 -> 95.63, 24 -> 95.53), and used for every pod list."""

_DECIMALS = 6
"""Scores are rounded to this many decimals (milli-GPU) so equal scores tie exactly."""

_ShapeKey = tuple[int, int, int, int, frozenset[str]]


class DanluPackScorer(ShareScorer):
    """FGD's fragmentation drop plus the fill-fragmentation drop (module docstring)."""

    name: ClassVar[str] = "danlu"

    def __init__(self, typical: TypicalPods, fgd_weight: float = FGD_WEIGHT) -> None:
        self.typical = typical
        self.fgd_weight = float(fgd_weight)
        self.fgd = FgdScorer(typical, quantize=False)
        self.fill = FillFragmentation(typical)
        self._cluster: ShareCluster | None = None
        # per request shape: node scores and the node epochs they were computed at
        self._scores: dict[_ShapeKey, tuple[FloatArray, IntArray]] = {}

    def _sync(self, cluster: ShareCluster) -> None:
        if self._cluster is not cluster:
            self._cluster = cluster
            self._scores.clear()
        self.fgd.sync(cluster)
        self.fill.sync(cluster)

    def _combine(self, fill_drop: FloatArray, fgd_drop: FloatArray) -> FloatArray:
        out: FloatArray = np.round(fill_drop + self.fgd_weight * fgd_drop, _DECIMALS)
        return out

    def _share_scores(
        self, cluster: ShareCluster, request: ShareRequest, rows: IntArray, values: IntArray
    ) -> FloatArray:
        return self._combine(
            self.fill.share_drop(cluster, request, rows, values),
            self.fgd.share_drops(cluster, request, rows, values),
        )

    def score(
        self,
        cluster: ShareCluster,
        request: ShareRequest,
        nodes: IntArray,
        rng: np.random.Generator,
    ) -> FloatArray:
        """Score of each feasible node (best over its GPUs for a share).

        Cached per request shape and recomputed only for the nodes that changed.
        """
        self._sync(cluster)
        key = (
            request.cpu_milli,
            request.memory_mib,
            request.gpu_milli,
            request.num_gpu,
            request.gpu_spec,
        )
        entry = self._scores.get(key)
        if entry is None:
            n = len(cluster)
            entry = (np.zeros(n, np.float64), np.full(n, -1, np.int64))
            self._scores[key] = entry
        values, seen = entry
        stale = nodes[seen[nodes] != cluster.epoch[nodes]]
        if stale.size:
            values[stale] = self._compute(cluster, request, stale)
            seen[stale] = cluster.epoch[stale]
        out: FloatArray = values[nodes]
        return out

    def _compute(self, cluster: ShareCluster, request: ShareRequest, nodes: IntArray) -> FloatArray:
        if request.shared:
            # one candidate per distinct free value on each node (equal GPUs score equal)
            srt = np.sort(cluster.gpu_free[nodes], axis=1)
            cand = srt >= request.gpu_milli
            cand[:, 1:] &= srt[:, 1:] != srt[:, :-1]
            r, c = np.nonzero(cand)
            pair = self._share_scores(cluster, request, nodes[r], srt[r, c])
            starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
            best: FloatArray = np.maximum.reduceat(pair, starts)
            return best
        return self._combine(
            self.fill.drop(cluster, request, nodes),
            self.fgd.whole_drops(cluster, request, nodes),
        )

    def pick_gpus(
        self,
        cluster: ShareCluster,
        request: ShareRequest,
        node: int,
        rng: np.random.Generator,
    ) -> tuple[int, ...]:
        """For a share, the GPU with the best score (ties: least free, lowest index)."""
        if not request.shared:
            return super().pick_gpus(cluster, request, node, rng)
        self._sync(cluster)
        free = cluster.gpu_free[node]
        gpus = np.flatnonzero(free >= request.gpu_milli)
        rows = np.full(gpus.size, node, np.int64)
        scores = self._share_scores(cluster, request, rows, free[gpus])
        best = gpus[scores == scores.max()]
        return (int(best[np.argmin(free[best])]),)
