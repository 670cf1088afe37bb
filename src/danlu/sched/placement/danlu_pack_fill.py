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


def scarcity(typical: TypicalPods, models: Sequence[str], capacity: FloatArray) -> FloatArray:
    """Per class: how much of its allowed GPU models' capacity the class is expected to need.

    ``models`` are the GPU models of a cluster and ``capacity`` their total milli-GPU. A
    class restricted to some models (``gpu_spec``) takes the fraction
    ``f_k = w_k * gpu_k / sum_j w_j * gpu_j`` of the GPU demand (``gpu_k`` the milli-GPU
    of one pod); at load 1 that is ``f_k * total capacity``, to be served by its models
    only, so its pressure is ``f_k * total capacity / capacity of its models``. Summed
    over the classes restricted to a model, it is the share of that model's capacity
    that constrained pods need (above 1: more than the model has). Unrestricted classes,
    classes without GPUs and classes none of whose models is present get 0.
    """
    unit = (typical.gpu_milli * typical.num_gpu).astype(np.float64)
    demand = typical.weight * unit
    total_demand = float(demand.sum())
    out: FloatArray = np.zeros(len(typical), np.float64)
    if total_demand <= 0:
        return out
    usable = typical.usable(models)  # (models, K)
    total_capacity = float(capacity.sum())
    for k, spec in enumerate(typical.specs):
        if not spec or unit[k] <= 0:
            continue
        own = float(capacity[usable[:, k]].sum())
        if own > 0:
            out[k] = demand[k] / total_demand * total_capacity / own
    return out


def with_large(typical: TypicalPods) -> tuple[TypicalPods, FloatArray]:
    """``typical`` with the shapes of ``typical.large`` it lacks added at frequency 0, and
    per class its share of the list's GPU demand if it asks for two or more whole GPUs
    (else 0). Without ``typical.large``: ``typical`` and zeros."""
    share: FloatArray = np.zeros(len(typical), np.float64)
    large = typical.large
    if large is None:
        return typical, share
    have = {_shape(typical, k): k for k in range(len(typical))}
    added = []
    for j in range(len(large)):
        k = have.get(_shape(large, j))
        if k is None:
            added.append(j)
        else:
            share[k] = large.weight[j]
    if not added:
        return typical, share
    pick = np.array(added, np.int64)
    classes = TypicalPods(
        cpu_milli=np.concatenate([typical.cpu_milli, large.cpu_milli[pick]]),
        gpu_milli=np.concatenate([typical.gpu_milli, large.gpu_milli[pick]]),
        num_gpu=np.concatenate([typical.num_gpu, large.num_gpu[pick]]),
        specs=typical.specs + tuple(large.specs[j] for j in added),
        weight=np.concatenate([typical.weight, np.zeros(pick.size)]),
        memory_mib=np.concatenate([typical.memory, large.memory[pick]]),
    )
    return classes, np.concatenate([share, large.weight[pick]])


def _shape(pods: TypicalPods, k: int) -> tuple[int, int, int, frozenset[str]]:
    return (int(pods.cpu_milli[k]), int(pods.gpu_milli[k]), int(pods.num_gpu[k]), pods.specs[k])


def host_pressure(classes: TypicalPods, share: FloatArray, cluster: ShareCluster) -> FloatArray:
    """Per class: its ``share`` of the GPU demand, times the cluster's GPU capacity (the
    demand it brings at load 1), over the GPU capacity of the nodes that could host one
    of its pods while empty (enough GPUs, CPU and memory, an allowed model). A class that
    only a few nodes can host has a high pressure: the 120-core, 8-GPU pods of the default
    openb list fit only the 39 nodes with 128 cores. 0 where ``share`` is 0 or no node
    could host it."""
    out: FloatArray = np.zeros(len(classes), np.float64)
    usable = classes.usable(cluster.models)[cluster.model_idx]  # (nodes, K)
    memory = classes.memory
    capacity = cluster.gpu_cap.sum(axis=1)
    for k in np.flatnonzero(share > 0):
        hosts = (
            usable[:, k]
            & (cluster.num_gpu >= classes.num_gpu[k])
            & (cluster.cpu_cap >= classes.cpu_milli[k])
            & (cluster.mem_cap >= memory[k])
        )
        own = float(capacity[hosts].sum())
        if own > 0:
            out[k] = float(share[k]) * cluster.total_gpu_milli / own
    return out


class FillFragmentation:
    """Fill fragmentation of the nodes of one cluster against ``typical`` (see module doc).

    Class memory comes from ``typical.memory_mib`` (absent: memory is not counted).
    With ``scarcity_weight`` > 0, the capacity that classes restricted to a few GPU
    models could fill counts more, by ``scarcity_weight`` x the class's pressure on its
    models (:func:`scarcity`): a class's fill fragment weighs ``w_k + scarcity_weight *
    pressure_k``, so taking capacity that constrained pods need costs more than taking
    the same capacity on a model nobody is restricted to. With ``large_weight`` > 0 the
    shapes of ``typical.large`` (two or more whole GPUs) are classes too (:func:`with_large`)
    and add ``large_weight`` x their :func:`host_pressure`: a pod that could go elsewhere
    keeps off the empty nodes that the rare multi-GPU pods need. The pressures are fixed
    per cluster (from the pod list and the cluster's capacities).
    """

    def __init__(
        self, typical: TypicalPods, scarcity_weight: float = 0.0, large_weight: float = 0.0
    ) -> None:
        self.scarcity_weight = float(scarcity_weight)
        self.large_weight = float(large_weight)
        if self.large_weight > 0:
            typical, self._large_share = with_large(typical)
        else:
            self._large_share = np.zeros(len(typical), np.float64)
        self.typical = typical
        g, n = typical.gpu_milli, typical.num_gpu
        mem = typical.memory
        self._share: BoolArray = (n == 1) & (g > 0) & (g < MILLI)
        self._gdiv: IntArray = np.where(g > 0, g, 1)
        self._ndiv: IntArray = np.maximum(n, 1)
        self._per_full: IntArray = MILLI // self._gdiv  # share pods one free GPU takes
        self._unit: FloatArray = (g * n).astype(np.float64)  # milli-GPU one pod fills
        self._cpu: IntArray = np.where(typical.cpu_milli > 0, typical.cpu_milli, 1)
        self._cpu_free_class: BoolArray = typical.cpu_milli == 0
        self._mem: IntArray = np.where(mem > 0, mem, 1)
        self._mem_free_class: BoolArray = mem == 0
        self._any_cpu_free = bool(self._cpu_free_class.any())
        self._any_mem_free = bool(self._mem_free_class.any())
        self._weight: FloatArray = typical.weight
        self._cluster: ShareCluster | None = None

    # ------------------------------------------------------------ pure pieces
    def slots(self, gpu_free: IntArray, n_full: IntArray) -> IntArray:
        """(rows, K) pods of each class that the GPUs alone could host."""
        share = (gpu_free[:, :, None] // self._gdiv).sum(axis=1)
        whole = n_full[:, None] // self._ndiv
        out: IntArray = np.where(self._share, share, whole)
        return out

    def usable_unit(self, usable: BoolArray) -> FloatArray:
        """(rows, K) milli-GPU one pod of each class fills on each row's node (0 where the
        class may not use the node)."""
        out: FloatArray = np.where(usable, self._unit, 0.0)
        return out

    def expected(
        self,
        unit: FloatArray,
        slots: IntArray,
        gpu_total: IntArray,
        cpu_free: IntArray,
        mem_free: IntArray,
    ) -> FloatArray:
        """Expected fill fragment per row (milli-GPU) from the per-class GPU slots;
        ``unit`` from :meth:`usable_unit`."""
        by_cpu = cpu_free[:, None] // self._cpu
        if self._any_cpu_free:
            by_cpu = np.where(self._cpu_free_class, _UNLIMITED, by_cpu)
        by_mem = mem_free[:, None] // self._mem
        if self._any_mem_free:
            by_mem = np.where(self._mem_free_class, _UNLIMITED, by_mem)
        pods = np.minimum(np.minimum(slots, by_cpu), by_mem)
        filled = pods * unit
        frag = gpu_total[:, None].astype(np.float64) - filled
        out: FloatArray = (frag * self._weight).sum(axis=1)
        return out

    # -------------------------------------------------------- cluster caches
    def sync(self, cluster: ShareCluster) -> None:
        """Bring the per-node caches up to date with ``cluster`` (by node epoch)."""
        if self._cluster is not cluster:
            self._cluster = cluster
            usable = self.typical.usable(cluster.models)[cluster.model_idx]
            self._unit_node: FloatArray = self.usable_unit(usable)
            self._weight = self.typical.weight
            if self.scarcity_weight > 0:
                cap = np.bincount(
                    cluster.model_idx, cluster.gpu_cap.sum(axis=1), len(cluster.models)
                ).astype(np.float64)
                pressure = scarcity(self.typical, cluster.models, cap)
                self._weight = self._weight + self.scarcity_weight * pressure
            if self.large_weight > 0:
                hosts = host_pressure(self.typical, self._large_share, cluster)
                self._weight = self._weight + self.large_weight * hosts
            n, k = len(cluster), len(self.typical)
            self._slots: IntArray = np.zeros((n, k), np.int64)
            self._frag: FloatArray = np.zeros(n, np.float64)
            self._epoch: IntArray = np.full(n, -1, np.int64)
        dirty = np.flatnonzero(cluster.epoch != self._epoch)
        if dirty.size:
            slots = self.slots(cluster.gpu_free[dirty], cluster.n_full[dirty])
            self._slots[dirty] = slots
            self._frag[dirty] = self.expected(
                self._unit_node[dirty],
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
            self._unit_node[rows],
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
        fill.usable_unit(usable),
        fill.slots(gpu_free, n_full),
        gpu_free.sum(axis=1),
        np.asarray(cpu_free, np.int64),
        np.asarray(mem_free, np.int64),
    )


def remainder_waste(typical: TypicalPods, models: Sequence[str]) -> FloatArray:
    """(len(models), 1001) expected milli-GPU that stays unused on one GPU with ``v`` free.

    The GPU is filled by a random stream of the typical pods that may use the model: the
    next pod is class ``k`` with probability ``w_k`` among the classes that still fit (a
    share class of ``g`` fits when ``g <= v``; a whole-GPU class only a fully free GPU,
    which it takes), and the GPU stops when no class fits; what is left then is wasted.
    ``E(v) = v`` when nothing fits, else ``sum_k w_k E(v - size_k) / sum_k w_k`` over the
    classes that fit. Unlike the per-class fill measure, this sees mixes: 210 left by
    470 + 320 is filled by 160 + 50 only if those arrive, 60 left by two 470-pods by
    nothing.
    """
    usable = typical.usable(models)  # (models, K)
    size = np.where(
        (typical.num_gpu == 1) & (typical.gpu_milli < MILLI), typical.gpu_milli, MILLI
    ).astype(np.int64)
    out: FloatArray = np.zeros((len(models), MILLI + 1), np.float64)
    for j in range(len(models)):
        ks = np.flatnonzero(usable[j])
        sizes, weights = size[ks], typical.weight[ks]
        # E(v) reads E at v - size >= v - smallest size only: a block of that many values
        # depends on the values before it alone, so each block is one array expression.
        step = int(sizes.min()) if sizes.size else MILLI
        start = 1
        while start <= MILLI:
            v = np.arange(start, min(start + step, MILLI + 1))
            fits = sizes[None, :] <= v[:, None]
            below = np.where(fits, v[:, None] - sizes[None, :], 0)
            total = np.where(fits, weights[None, :], 0.0).sum(axis=1)
            mixed = np.where(fits, weights[None, :] * out[j, below], 0.0).sum(axis=1)
            out[j, v] = np.where(total > 0.0, mixed / np.where(total > 0.0, total, 1.0), v)
            start += step
    return out
