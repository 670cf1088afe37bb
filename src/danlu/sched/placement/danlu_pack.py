"""danlu's packing scorer for fractional and memory-sized GPU requests.

FGD (ATC'23) places a request where a node's expected fragmentation against the typical
pod shapes grows least, where a class's fragment is the free GPU capacity that ONE more
pod of the class could not use. That test misses two kinds of waste that decide the
allocation ratio of a nearly full cluster:

* capacity stranded by CPU or host memory: a CPU-only pod that leaves a 96-core, 8-GPU
  node with 80 cores still "fits" one more 12-core GPU pod, but not eight of them;
* remainders that no whole number of pods fills: a 470-pod on an empty GPU leaves 530,
  which fits one more 470-pod and then 60 that nothing typical uses.

danlu scores a candidate placement by the drop of three expected wastes:

``score = fill_drop + fgd_weight * fgd_drop + remainder_weight * remainder_drop``

``fgd_drop`` is FGD's measure, un-quantised; ``fill_drop`` is the fill fragmentation of
:mod:`danlu.sched.placement.danlu_pack_fill` (how much of the free capacity pods of each
typical class could fill, counting GPUs, CPU and memory; the class memory is the median
of its requests), with the classes restricted to a few GPU models weighted up by how
scarce their models are (``scarcity_weight``, see
:class:`~danlu.sched.placement.danlu_pack_fill.FillFragmentation`). For a share,
``remainder_drop`` is the drop of the expected unused remainder of the GPU it goes on
(:func:`~danlu.sched.placement.danlu_pack_fill.remainder_waste`: what a random stream of
the typical pods that fit would leave of it), which sees mixes of classes that the
per-class fill measure does not (470 + 320 leaves 210, which only 160 + 50 fill); it is 0
for CPU-only and whole-GPU requests. FGD's measure dominates (``fgd_weight`` =
:data:`FGD_WEIGHT`); the other two decide among placements FGD sees as (nearly) equal and
stop it from stranding CPU-starved GPUs, scarce GPU models and unfillable remainders.
From that sum the score subtracts ``reserve_weight`` x the host-reserve cost
(:mod:`danlu.sched.placement.danlu_pack_reserve`): what the placement costs the pods of two
or more whole GPUs still to come when it takes one of the few nodes left that can host
them.
Scores are rounded to 1e-6 milli-GPU so that equal scores tie exactly; ties go to the
lowest node rank (the experiment's seeded node order). A share goes to the GPU of the
chosen node with the best score (ties: the GPU with the least free capacity, then the
lowest index). Deterministic; no state beyond caches.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from danlu.core.errors import ConfigError
from danlu.sched.placement.danlu_pack_fill import FillFragmentation, remainder_waste
from danlu.sched.placement.danlu_pack_reserve import HostReserve
from danlu.sched.placement.frag import FgdScorer, TypicalPods
from danlu.sched.placement.share import (
    MILLI,
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

SCARCITY_WEIGHT = 8.0
"""Weight of the GPU-model pressure added to the fill-measure weight of a model-restricted
class (:class:`~danlu.sched.placement.danlu_pack_fill.FillFragmentation`). Chosen on the
gpuspec25 pod list, seeds 42-43 (allocation ratio: 0 -> 93.16 %, 1 -> 93.74, 4 -> 95.23,
8 -> 95.25, 16 -> 95.29); gpuspec20 gives 95.32 / 95.31 / 95.34 at 4 / 8 / 16. No effect on
pod lists without ``gpu_spec``."""

REMAINDER_WEIGHT = 4.0
"""Weight of the drop of a share GPU's expected remainder waste (milli-GPU). Chosen on the
default pod list, seeds 42-51 (2 -> 95.73 %, 4 -> 95.73, 6 -> 95.75, 8 -> 95.73,
12 -> 95.59; 0 -> 95.66): the middle of the plateau."""

LARGE_WEIGHT = 0.1
"""Weight of the host pressure of the pod list's shapes of two or more whole GPUs in the
fill measure (:func:`~danlu.sched.placement.danlu_pack_fill.host_pressure`). Without it
the scorer spread high-CPU and high-memory one-GPU pods over the 128-core nodes and
refused 8-GPU pods from 4-42 % of the demand arrived on (FGD: from 94.9 %). Chosen on the
default pod list, seeds 42-45 (allocation ratio, and the arrived demand at which the
first multi-GPU pod was refused: 0 -> 95.69 %, 4.7-41.6 %; 0.05 -> 95.73, 80.8-83.2;
0.1 -> 95.71, 95.9-96.7; 0.15 -> 95.73, 95.9-96.7; 0.2 -> 95.75, 95.9-96.7; 0.3 -> 95.56,
68.9-82.0; 0.5 -> 95.53, 95.6-96.7): the smallest weight at which the first refusal
comes as late as FGD's. Checked on seeds 46-61 and the other 18 lists
(``docs/danlu-packing.md``)."""

RESERVE_WEIGHT = 0.05
"""Weight of the host-reserve cost
(:class:`~danlu.sched.placement.danlu_pack_reserve.HostReserve`): what a placement costs
the wide pods still to come once few nodes can host them. Chosen on seeds 42-45 of the
default and gpushare60 lists (allocation ratio; arrived demand at the first refused
multi-GPU pod): default 0 -> 95.71 %, 95.9-96.7; 0.05 -> 95.79, 95.9-96.7; 0.1 -> 95.77,
95.9-96.7; 0.15 -> 95.62; 0.2 -> 95.64; 0.3 -> 95.59; gpushare60 0 -> 91.64, 70.6-73.8;
0.025 -> 91.68, 91.1-96.8; 0.05 -> 91.65, 92.4-96.8; 0.1 -> 91.64, 92.4-96.8; 1 -> 91.50,
92.4-96.8: the middle of the weights that keep the wide pods on both lists without costing
default's ratio."""

_DECIMALS = 6
"""Scores are rounded to this many decimals (milli-GPU) so equal scores tie exactly."""

_NEAR = 1e-5
"""Margin (milli-GPU) past the rounding of scores when leaving out nodes that cannot win."""

_ShapeKey = tuple[int, int, int, int, frozenset[str]]


def _weight(name: str, value: object) -> float:
    """``value`` as a weight of the score: a finite number >= 0, else :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"danlu scorer: {name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"danlu scorer: {name} must be finite and >= 0, got {value!r}")
    return float(value)


class DanluPackScorer(ShareScorer):
    """FGD's fragmentation drop plus the fill-fragmentation and remainder drops (module
    docstring)."""

    name: ClassVar[str] = "danlu"

    def __init__(
        self,
        typical: TypicalPods,
        fgd_weight: float = FGD_WEIGHT,
        scarcity_weight: float = SCARCITY_WEIGHT,
        remainder_weight: float = REMAINDER_WEIGHT,
        large_weight: float = LARGE_WEIGHT,
        reserve_weight: float = RESERVE_WEIGHT,
    ) -> None:
        self.typical = typical
        self.fgd_weight = _weight("fgd_weight", fgd_weight)
        self.scarcity_weight = _weight("scarcity_weight", scarcity_weight)
        self.remainder_weight = _weight("remainder_weight", remainder_weight)
        self.large_weight = _weight("large_weight", large_weight)
        self.reserve_weight = _weight("reserve_weight", reserve_weight)
        self.reserve = (
            HostReserve(typical.large)
            if typical.large is not None and self.reserve_weight > 0
            else None
        )
        self.fgd = FgdScorer(typical, quantize=False)
        self.fill = FillFragmentation(typical, self.scarcity_weight, self.large_weight)
        self._cluster: ShareCluster | None = None
        # per request shape: node scores and the node epochs they were computed at
        self._scores: dict[_ShapeKey, tuple[FloatArray, IntArray, IntArray]] = {}

    def _sync(self, cluster: ShareCluster) -> None:
        if self._cluster is not cluster:
            self._cluster = cluster
            self._scores.clear()
            self._waste: FloatArray = remainder_waste(self.typical, cluster.models)
        self.fgd.sync(cluster)
        self.fill.sync(cluster)

    def _combine(
        self, fill_drop: FloatArray, fgd_drop: FloatArray, remainder_drop: FloatArray | None = None
    ) -> FloatArray:
        total = fill_drop + self.fgd_weight * fgd_drop
        if remainder_drop is not None:
            total = total + self.remainder_weight * remainder_drop
        out: FloatArray = np.round(total, _DECIMALS)
        return out

    def share_scores(
        self, cluster: ShareCluster, request: ShareRequest, rows: IntArray, values: IntArray
    ) -> FloatArray:
        """Scores (higher is better) of share ``request`` on a GPU of node ``rows[i]`` with
        ``values[i]`` milli-GPU free (each at least the request's), for a caller choosing
        GPUs itself (:mod:`danlu.sched.placement.share_mirror`). Without the host-reserve
        cost, which depends on the whole cluster: a caller keeping these per node until
        the node changes subtracts :meth:`reserve_costs` at every use."""
        self._sync(cluster)
        return self._share_scores(cluster, request, rows, values)

    def reserve_costs(
        self, cluster: ShareCluster, request: ShareRequest, rows: IntArray, values: IntArray
    ) -> FloatArray | None:
        """``reserve_weight`` x the host-reserve cost of ``request`` on node ``rows[i]``,
        taking a GPU with ``values[i]`` free for a share (its whole GPUs otherwise); None
        when there is none (no wide shape in the typical pods, or weight 0)."""
        if self.reserve is None:
            return None
        full = (values == MILLI).astype(np.int64) if request.shared else request.num_gpu
        taken = np.broadcast_to(np.asarray(full, np.int64), rows.shape)
        cost = self.reserve.costs(cluster, rows, taken, request.cpu_milli, request.memory_mib)
        out: FloatArray = self.reserve_weight * cost
        return out

    def minus(self, scores: FloatArray, costs: FloatArray | None) -> FloatArray:
        """``scores`` less ``costs``, rounded as scores are (unchanged where no cost)."""
        if costs is None or not costs.any():
            return scores
        out: FloatArray = np.round(scores - costs, _DECIMALS)
        return out

    def _share_scores(
        self, cluster: ShareCluster, request: ShareRequest, rows: IntArray, values: IntArray
    ) -> FloatArray:
        model = cluster.model_idx[rows]
        return self._combine(
            self.fill.share_drop(cluster, request, rows, values),
            self.fgd.share_drops(cluster, request, rows, values),
            self._waste[model, values] - self._waste[model, values - request.gpu_milli],
        )

    def _key(self, request: ShareRequest) -> _ShapeKey:
        return (
            request.cpu_milli,
            request.memory_mib,
            request.gpu_milli,
            request.num_gpu,
            request.gpu_spec,
        )

    def score(
        self,
        cluster: ShareCluster,
        request: ShareRequest,
        nodes: IntArray,
        rng: np.random.Generator,
    ) -> FloatArray:
        """Score of each feasible node (best over its GPUs for a share).

        Cached per request shape and recomputed only for the nodes that changed; for a
        share the cache also keeps the free value of the best GPU, which
        :meth:`pick_gpus` then reuses. The host-reserve cost is subtracted on the nodes
        that could still be best after it; a node further below the best than the largest
        cost a placement can have keeps its score without it (it cannot be chosen either
        way), so the best score and the nodes that reach it are exact.
        """
        self._sync(cluster)
        key = self._key(request)
        entry = self._scores.get(key)
        if entry is None:
            n = len(cluster)
            entry = (np.zeros(n, np.float64), np.full(n, -1, np.int64), np.zeros(n, np.int64))
            self._scores[key] = entry
        values, seen, best_free = entry
        stale = nodes[seen[nodes] != cluster.epoch[nodes]]
        if stale.size:
            values[stale], best_free[stale] = self._compute(cluster, request, stale)
            seen[stale] = cluster.epoch[stale]
        plain = values[nodes]
        if self.reserve is None or plain.size == 0:
            return plain
        # Only a node whose plain score is within the largest possible cost of the best one
        # can win; the others keep their plain score, still below the winner's.
        bound = self.reserve_weight * self.reserve.max_cost(cluster) + _NEAR
        near = np.flatnonzero(plain >= plain.max() - bound)
        at = nodes[near]
        costs = self.reserve_costs(cluster, request, at, best_free[at])
        out = plain.copy()
        out[near] = self.minus(plain[near], costs)
        return out

    def _compute(
        self, cluster: ShareCluster, request: ShareRequest, nodes: IntArray
    ) -> tuple[FloatArray, IntArray]:
        """Scores of ``nodes`` and, for a share, the free value of the GPU to take."""
        if request.shared:
            # one candidate per distinct free value on each node (equal GPUs score equal);
            # every node here is feasible, so row i of the candidates belongs to nodes[i]
            srt = np.sort(cluster.gpu_free[nodes], axis=1)
            cand = srt >= request.gpu_milli
            cand[:, 1:] &= srt[:, 1:] != srt[:, :-1]
            r, c = np.nonzero(cand)
            pair = self._share_scores(cluster, request, nodes[r], srt[r, c])
            new_row = np.ones(r.size, np.bool_)
            new_row[1:] = r[1:] != r[:-1]
            best: FloatArray = np.maximum.reduceat(pair, np.flatnonzero(new_row))
            # best GPU: the least free value among the best-scoring ones (values ascend)
            hit = np.flatnonzero(pair == best[r])
            first_hit = np.ones(hit.size, np.bool_)
            first_hit[1:] = r[hit[1:]] != r[hit[:-1]]
            first = hit[first_hit]
            value: IntArray = srt[r[first], c[first]]
            return best, value
        scores = self._combine(
            self.fill.drop(cluster, request, nodes),
            self.fgd.whole_drops(cluster, request, nodes),
        )
        return scores, np.zeros(nodes.size, np.int64)

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
        free = cluster.gpu_free[node]
        entry = self._scores.get(self._key(request))
        if self._cluster is cluster and entry is not None and entry[1][node] == cluster.epoch[node]:
            value = int(entry[2][node])  # scored at this state by score()
        else:
            self._sync(cluster)
            gpus = np.flatnonzero(free >= request.gpu_milli)
            rows = np.full(gpus.size, node, np.int64)
            scores = self._share_scores(cluster, request, rows, free[gpus])
            value = int(free[gpus[scores == scores.max()]].min())
        return (int(np.flatnonzero(free == value)[0]),)
