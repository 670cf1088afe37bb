"""Host reserve: what a placement costs the wide pods still to come.

The fill measure's host pressure (:func:`~danlu.sched.placement.danlu_pack_fill.host_pressure`)
keeps pods off the nodes that the rare shapes of two or more whole GPUs need, with a weight
fixed per cluster. It does not see how few such nodes are left. On pod lists where most
pods are shares (gpushare60, gpushare80) the remainder and fill measures spread the shares
over the GPUs of every node, and the wide pods were refused from 70.6 % (gpushare60) and
65.4 % (gpushare80) of the demand arrived, where FGD refuses them from 91.1 % and 88.7 %
(seeds 42-51).

:class:`HostReserve` prices that directly. For each wide shape ``k`` of the list
(``typical.large``: ``g_k`` GPUs, ``d_k`` its share of the list's GPU demand):

* ``H_k``: the nodes that can host one pod of ``k`` now (an allowed GPU model, at least
  ``g_k`` fully free GPUs, its CPU and host memory free);
* ``D_k = d_k x`` the cluster's free milli-GPU: the demand of ``k`` still to come, if the
  arrivals fill what is free, as they do up to load 1;
* a placement after which a host of ``k`` can no longer host one costs
  ``min(1000 g_k, D_k / H_k)`` milli-GPU: each of the ``H_k`` hosts serves ``D_k / H_k`` of
  that demand, at most one pod's worth.

The score is lowered by ``reserve_weight`` x the sum of those costs over the shapes. With
hundreds of hosts left the cost of one is small; with a handful it reaches a whole wide
pod, and a pod that fits elsewhere goes elsewhere. The costs depend on the whole cluster
(``H_k`` and the free capacity), so they are computed at every call, never cached per node.
"""

from __future__ import annotations

import numpy as np

from danlu.sched.placement.frag import TypicalPods
from danlu.sched.placement.share import MILLI, BoolArray, FloatArray, IntArray, ShareCluster

_NONE = np.iinfo(np.int64).max
"""Slack of a node that hosts no shape: nothing it gives up breaks a host."""


class HostReserve:
    """The host-reserve cost (milli-GPU) of placements on one cluster (module docstring).

    ``large``: the list's wide shapes with their shares of the GPU demand as weights
    (``TypicalPods.large``). Per node it keeps, by node epoch, which shapes the node can
    host and the least slack over those shapes in fully free GPUs, CPU and host memory: a
    placement breaks a host exactly when it takes more than one of those slacks, so only
    such placements are looked at shape by shape."""

    def __init__(self, large: TypicalPods) -> None:
        self.large = large
        self._unit: FloatArray = (large.num_gpu * MILLI).astype(np.float64)
        self._cluster: ShareCluster | None = None
        self._usable: BoolArray = np.zeros((0, len(large)), np.bool_)
        self._host: BoolArray = np.zeros((0, len(large)), np.bool_)
        self._slack: IntArray = np.zeros((0, 3), np.int64)
        """Per node: the least fully-free-GPU, CPU and memory slack over its hosted shapes."""
        self._epoch: IntArray = np.zeros(0, np.int64)
        """Each node's epoch when its rows of ``_host`` and ``_slack`` were computed."""
        self._count: IntArray = np.zeros(len(large), np.int64)
        """``_host`` summed over the nodes: the hosts of each shape."""

    def _refresh(self, cluster: ShareCluster) -> None:
        """Bring the per-node hosts, slacks and host counts up to date (by node epoch)."""
        if self._cluster is not cluster:
            self._cluster = cluster
            self._usable = self.large.usable(cluster.models)[cluster.model_idx]
            self._host = np.zeros(self._usable.shape, np.bool_)
            self._slack = np.full((len(cluster), 3), _NONE, np.int64)
            self._epoch = np.full(len(cluster), -1, np.int64)
            self._count = np.zeros(len(self.large), np.int64)
        dirty = np.flatnonzero(cluster.epoch != self._epoch)
        if dirty.size == 0:
            return
        slacks = self._slacks(cluster, dirty)
        host = self._usable[dirty] & (slacks[0] >= 0) & (slacks[1] >= 0) & (slacks[2] >= 0)
        for column, slack in enumerate(slacks):
            self._slack[dirty, column] = np.where(host, slack, _NONE).min(axis=1)
        self._count += host.sum(axis=0) - self._host[dirty].sum(axis=0)
        self._host[dirty] = host
        self._epoch[dirty] = cluster.epoch[dirty]

    def _slacks(self, cluster: ShareCluster, rows: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        """Per row and shape: the fully free GPUs, CPU and host memory a node would have
        left after one pod of the shape (negative: it cannot host one)."""
        large = self.large
        return (
            cluster.n_full[rows][:, None] - large.num_gpu,
            cluster.cpu_free[rows][:, None] - large.cpu_milli,
            cluster.mem_free[rows][:, None] - large.memory,
        )

    def max_cost(self, cluster: ShareCluster) -> float:
        """The most one placement can cost now (one that stops a node hosting every shape)."""
        self._refresh(cluster)
        return float(self._per_host(cluster).sum())

    def _per_host(self, cluster: ShareCluster) -> FloatArray:
        demand = self.large.weight * float(cluster.gpu_free_total.sum())
        out: FloatArray = np.minimum(self._unit, demand / np.maximum(self._count, 1))
        return out

    def costs(
        self,
        cluster: ShareCluster,
        rows: IntArray,
        full_taken: IntArray,
        cpu_taken: int,
        mem_taken: int,
    ) -> FloatArray:
        """Cost of each placement on node ``rows[i]`` that takes ``full_taken[i]`` fully free
        GPUs, ``cpu_taken`` milli-cores and ``mem_taken`` MiB of host memory."""
        self._refresh(cluster)
        out: FloatArray = np.zeros(rows.size, np.float64)
        slack = self._slack[rows]
        breaks = np.flatnonzero(
            (slack[:, 0] < full_taken) | (slack[:, 1] < cpu_taken) | (slack[:, 2] < mem_taken)
        )
        if breaks.size == 0:
            return out
        at = rows[breaks]
        full_left, cpu_left, mem_left = self._slacks(cluster, at)
        lost = self._host[at] & (
            (full_left < full_taken[breaks][:, None])
            | (cpu_left < cpu_taken)
            | (mem_left < mem_taken)
        )
        out[breaks] = lost.astype(np.float64) @ self._per_host(cluster)
        return out
