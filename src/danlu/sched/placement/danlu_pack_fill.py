"""Fill fragmentation: free GPU capacity that a typical pod class could not fill.

FGD's measure (see :mod:`danlu.sched.placement.frag`) asks whether ONE more pod of a
typical class fits a node. danlu's packing scorer adds a second, complementary measure
that asks how much of the node's free GPU capacity pods of the class could fill if only
that class kept arriving, counting every resource the pods need:

* a share class (a fraction ``g`` of one GPU) fits ``floor(free / g)`` pods on each GPU,
  so a GPU with 1000 free leaves ``1000 mod g`` unfillable (two 470-pods leave 60);
* a whole-GPU class of ``n`` GPUs fits ``floor(fully free GPUs / n)`` pods;
* either is capped by the node's free CPU and free host memory (``floor(cpu / c)`` and
  ``floor(mem / m)`` pods), so GPUs stranded by CPU or memory count as fragment;
* a class that may not use the node's GPU model, or asks for no GPU, fills nothing.

``fill fragment(node, k) = free milli-GPU - milli-GPU that pods of class k could fill``,
and the node's fill fragmentation is its expectation over the typical classes. It sees
what FGD's one-pod test misses: a CPU-only pod that leaves a node unable to host pods for
all of its GPUs, and a share that leaves a remainder no whole number of pods fills.

:class:`FillFragmentation` keeps the per-node, per-class pod counts of a
:class:`~danlu.sched.placement.share.ShareCluster` up to date (by node epoch) and
evaluates the fragmentation drop of candidate placements in vectorised form.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from danlu.sched.placement.frag import TypicalPods
from danlu.sched.placement.share import (
    MILLI,
    BoolArray,
    FloatArray,
    IntArray,
    ShareCluster,
    ShareRequest,
)

_UNLIMITED = np.int64(1) << np.int64(40)
"""Pod count standing for "not limited" (a class that asks for no CPU or no memory)."""


class FillFragmentation:
    """Fill fragmentation of the nodes of one cluster against ``typical`` (see module doc).

    Class memory comes from ``typical.memory_mib`` (absent: memory is not counted).
    """

    def __init__(self, typical: TypicalPods) -> None:
        self.typical = typical
        g, n = typical.gpu_milli, typical.num_gpu
        mem = typical.memory_mib if typical.memory_mib is not None else np.zeros_like(g)
        self._share: BoolArray = (n == 1) & (g > 0) & (g < MILLI)
        self._gdiv: IntArray = np.where(g > 0, g, 1)
        self._ndiv: IntArray = np.maximum(n, 1)
        self._per_full: IntArray = MILLI // self._gdiv  # share pods one free GPU takes
        self._unit: FloatArray = (g * n).astype(np.float64)  # milli-GPU one pod fills
        self._cpu: IntArray = np.where(typical.cpu_milli > 0, typical.cpu_milli, 1)
        self._cpu_free_class: BoolArray = typical.cpu_milli == 0
        self._mem: IntArray = np.where(mem > 0, mem, 1)
        self._mem_free_class: BoolArray = mem == 0
        self._weight: FloatArray = typical.weight
        self._cluster: ShareCluster | None = None

    # ------------------------------------------------------------ pure pieces
    def slots(self, gpu_free: IntArray, n_full: IntArray) -> IntArray:
        """(rows, K) pods of each class that the GPUs alone could host."""
        share = (gpu_free[:, :, None] // self._gdiv).sum(axis=1)
        whole = n_full[:, None] // self._ndiv
        out: IntArray = np.where(self._share, share, whole)
        return out

    def expected(
        self,
        usable: BoolArray,
        slots: IntArray,
        gpu_total: IntArray,
        cpu_free: IntArray,
        mem_free: IntArray,
    ) -> FloatArray:
        """Expected fill fragment per row (milli-GPU) from the per-class GPU slots."""
        by_cpu = np.where(self._cpu_free_class, _UNLIMITED, cpu_free[:, None] // self._cpu)
        by_mem = np.where(self._mem_free_class, _UNLIMITED, mem_free[:, None] // self._mem)
        pods = np.minimum(np.minimum(slots, by_cpu), by_mem)
        filled = np.where(usable, pods * self._unit, 0.0)
        frag = gpu_total[:, None].astype(np.float64) - filled
        out: FloatArray = (frag * self._weight).sum(axis=1)
        return out

    # -------------------------------------------------------- cluster caches
    def sync(self, cluster: ShareCluster) -> None:
        """Bring the per-node caches up to date with ``cluster`` (by node epoch)."""
        if self._cluster is not cluster:
            self._cluster = cluster
            self._usable: BoolArray = self.typical.usable(cluster.models)[cluster.model_idx]
            n, k = len(cluster), len(self.typical)
            self._slots: IntArray = np.zeros((n, k), np.int64)
            self._frag: FloatArray = np.zeros(n, np.float64)
            self._epoch: IntArray = np.full(n, -1, np.int64)
        dirty = np.flatnonzero(cluster.epoch != self._epoch)
        if dirty.size:
            slots = self.slots(cluster.gpu_free[dirty], cluster.n_full[dirty])
            self._slots[dirty] = slots
            self._frag[dirty] = self.expected(
                self._usable[dirty],
                slots,
                cluster.gpu_free_total[dirty],
                cluster.cpu_free[dirty],
                cluster.mem_free[dirty],
            )
            self._epoch[dirty] = cluster.epoch[dirty]

    def drop(self, cluster: ShareCluster, request: ShareRequest, nodes: IntArray) -> FloatArray:
        """Fill-fragmentation drop of placing a CPU-only or whole-GPU ``request`` on each
        of ``nodes`` (call :meth:`sync` first)."""
        slots = self._slots[nodes]
        if request.num_gpu:
            n_full = cluster.n_full[nodes] - request.num_gpu
            share = slots - request.num_gpu * self._per_full
            slots = np.where(self._share, share, n_full[:, None] // self._ndiv)
        return self._drop(cluster, request, nodes, slots)

    def share_drop(
        self, cluster: ShareCluster, request: ShareRequest, rows: IntArray, values: IntArray
    ) -> FloatArray:
        """Drop for putting the share ``request`` on a GPU with ``values`` free on node
        ``rows`` (parallel arrays; call :meth:`sync` first)."""
        after = np.maximum(values - request.gpu_milli, 0)
        d_share = after[:, None] // self._gdiv - values[:, None] // self._gdiv
        n_full = cluster.n_full[rows] - (values == MILLI)
        slots = np.where(self._share, self._slots[rows] + d_share, n_full[:, None] // self._ndiv)
        return self._drop(cluster, request, rows, slots)

    def _drop(
        self, cluster: ShareCluster, request: ShareRequest, rows: IntArray, slots: IntArray
    ) -> FloatArray:
        after = self.expected(
            self._usable[rows],
            slots,
            cluster.gpu_free_total[rows] - request.total_gpu_milli,
            cluster.cpu_free[rows] - request.cpu_milli,
            cluster.mem_free[rows] - request.memory_mib,
        )
        out: FloatArray = self._frag[rows] - after
        return out


def fill_fragmentation(
    cpu_free: IntArray,
    mem_free: IntArray,
    gpu_free: IntArray,
    node_models: Sequence[str],
    typical: TypicalPods,
) -> FloatArray:
    """Expected fill fragment (milli-GPU) of each node against ``typical``.

    ``cpu_free``, ``mem_free`` (N,), ``gpu_free`` (N, G) free milli per GPU (absent GPUs
    as 0) and each node's GPU model; 0 for a node with no free GPU capacity.
    """
    fill = FillFragmentation(typical)
    models = sorted(set(node_models))
    usable = typical.usable(models)[[models.index(m) for m in node_models]]
    gpu_free = np.asarray(gpu_free, np.int64)
    n_full = np.count_nonzero(gpu_free == MILLI, axis=1).astype(np.int64)
    return fill.expected(
        usable,
        fill.slots(gpu_free, n_full),
        gpu_free.sum(axis=1),
        np.asarray(cpu_free, np.int64),
        np.asarray(mem_free, np.int64),
    )
