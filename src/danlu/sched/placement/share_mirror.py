"""danlu's packing scorer inside a scheduling round: the ``danlu`` placement strategy.

:class:`~danlu.sched.placement.gang.FreeMap` tracks a round's free compute (milli-GPU) and
memory per GPU; the packing scorer of ``danlu sim pack``
(:class:`~danlu.sched.placement.danlu_pack.DanluPackScorer`) scores placements on a
:class:`~danlu.sched.placement.share.ShareCluster`. :class:`ShareMirror` keeps a
``ShareCluster`` in step with a free map (the GPUs' free milli; a GPU closed to new work
counts as full; CPU and host memory unbounded, as the free map does not track them) and asks
the scorer which candidate GPU a share should take. Only the nodes whose GPUs changed since
the last call are marked changed, so the scorer's per-node caches carry over within the
round, and a GPU's score for a share size is kept until its node changes (a score depends
on the GPU's node, its free milli and the share alone; the host-reserve cost, which depends
on the whole cluster, is subtracted at every call). The typical pods are the request
shapes of the jobs in the view, as for ``fgd``.
"""

from __future__ import annotations

import numpy as np

from danlu.core.cluster import MILLI_PER_GPU
from danlu.sched.placement.danlu_pack import DanluPackScorer
from danlu.sched.placement.frag import TypicalPods
from danlu.sched.placement.share import (
    BoolArray,
    FloatArray,
    IntArray,
    ShareCluster,
    ShareNode,
    ShareRequest,
)

_UNBOUNDED = 1 << 40
"""CPU milli-cores and memory MiB of a mirrored node: never the binding resource."""


class ShareMirror:
    """A :class:`ShareCluster` mirroring a free map's GPUs, and the danlu scorer over it.

    ``offsets``, ``sizes`` and ``models``: each node's first flat GPU index, GPU count and
    GPU model, as the free map has them."""

    def __init__(
        self, offsets: IntArray, sizes: IntArray, models: list[str], typical: TypicalPods
    ) -> None:
        nodes = [
            ShareNode(f"node-{i}", _UNBOUNDED, _UNBOUNDED, int(size), models[i] or "gpu")
            for i, size in enumerate(sizes.tolist())
        ]
        self.scorer = DanluPackScorer(typical)
        self.cluster = ShareCluster(nodes, self.scorer)
        self._offsets = offsets
        width = self.cluster.max_gpus
        columns = np.arange(width)
        exists = columns[None, :] < sizes[:, None]
        self._flat: IntArray = np.where(exists, offsets[:, None] + columns[None, :], 0)
        self._exists: BoolArray = exists
        self._gpu_count = int(sizes.sum())
        self._scored: dict[int, tuple[FloatArray, IntArray]] = {}
        """Per share size (milli): each flat GPU's score and its node's epoch when scored."""
        self.synced_with: object | None = None
        """A token of the free map (:class:`~danlu.sched.placement.gang.FreeMap`) last
        synced in full: that map may then sync only the nodes it changed since."""

    def sync(
        self, free_milli: IntArray, open_gpus: BoolArray | None, nodes: IntArray | None = None
    ) -> None:
        """Take the free map's free milli-GPU (flat, one per GPU); GPUs not open count full.
        ``nodes``: only these nodes may have changed since the last sync (default: any)."""
        flat, exists = self._flat, self._exists
        if nodes is not None:
            flat, exists = flat[nodes], exists[nodes]
        free = np.clip(free_milli[flat], 0, MILLI_PER_GPU)
        if open_gpus is not None:
            exists = exists & open_gpus[flat]
        rows = np.where(exists, free, 0).astype(np.int64)
        cluster = self.cluster
        before = cluster.gpu_free if nodes is None else cluster.gpu_free[nodes]
        moved = np.flatnonzero((rows != before).any(axis=1))
        if moved.size == 0:
            return
        rows, exists = rows[moved], exists[moved]
        changed = moved if nodes is None else nodes[moved]
        cluster.gpu_free[changed] = rows
        cluster.gpu_free_total[changed] = rows.sum(axis=1)
        cluster.n_full[changed] = ((rows == MILLI_PER_GPU) & exists).sum(axis=1)
        cluster.max_free[changed] = rows.max(axis=1)
        cluster.epoch[changed] += 1

    def scores(self, gpus: IntArray, nodes: IntArray, need: int) -> FloatArray:
        """The scorer's score (higher is better) of a share of ``need`` milli-GPU on each of
        ``gpus`` (flat indices, on ``nodes``), after :meth:`sync`."""
        cached = self._scored.get(need)
        if cached is None:
            cached = self._scored[need] = (
                np.zeros(self._gpu_count, np.float64),
                np.full(self._gpu_count, -1, np.int64),
            )
        scored, stamps = cached
        epochs = self.cluster.epoch[nodes]
        stale = stamps[gpus] != epochs
        request = ShareRequest(cpu_milli=0, num_gpu=1, gpu_milli=need)
        values = self.cluster.gpu_free[nodes, gpus - self._offsets[nodes]]
        if stale.any():
            at, rows = gpus[stale], nodes[stale]
            scored[at] = self.scorer.share_scores(self.cluster, request, rows, values[stale])
            stamps[at] = epochs[stale]
        costs = self.scorer.reserve_costs(self.cluster, request, nodes, values)
        return self.scorer.minus(scored[gpus], costs)
