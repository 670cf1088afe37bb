"""GPU fragmentation against a workload of typical pods, and the FGD scorer built on it.

Fragmentation (FGD paper, ATC'23): the free GPU capacity of a node is "fragmented" for a
pod when the pod could not use it. For a pod class ``k`` and a node:

* the pod asks for no GPU, or may not run on the node's GPU model, or the node lacks the
  CPU for it, or has fewer than ``num_gpu`` GPUs with ``gpu_milli`` free: then ALL the
  node's free milli-GPU count as fragment for ``k``;
* otherwise only the free milli on the GPUs with less than ``gpu_milli`` free counts.

The node's fragmentation is the expectation over the typical pods (weights sum to 1).
FGD places a request where the fragmentation grows least (decreases most).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from danlu.core.errors import ConfigError
from danlu.sched.placement.share import (
    MILLI,
    BoolArray,
    FloatArray,
    IntArray,
    ShareCluster,
    ShareRequest,
    ShareScorer,
)


@dataclass(frozen=True, eq=False)
class TypicalPods:
    """Pod classes with their probabilities (``weight`` sums to 1).

    Arrays of one entry per class: ``cpu_milli``, ``gpu_milli`` (per GPU, 0 for CPU-only
    pods), ``num_gpu``, ``weight``; ``specs`` holds the allowed GPU models (empty: any).
    ``memory_mib`` (optional) is the median host memory of the class's requests; FGD's
    measure ignores it, danlu's fill measure counts it. ``large`` (optional, filled by
    :func:`typical_pods`) holds the list's request shapes of two or more whole GPUs,
    typical or not, each weighted by its share of the list's GPU demand: such shapes are
    rare by count, so the typical classes often leave them out, but they ask for a large
    part of the GPUs. FGD's measure ignores it; danlu's fill measure keeps nodes for them.
    """

    cpu_milli: IntArray
    gpu_milli: IntArray
    num_gpu: IntArray
    specs: tuple[frozenset[str], ...]
    weight: FloatArray
    memory_mib: IntArray | None = None
    large: TypicalPods | None = None

    def __len__(self) -> int:
        return len(self.specs)

    @property
    def memory(self) -> IntArray:
        """``memory_mib``, or zeros where the classes record no memory."""
        return self.memory_mib if self.memory_mib is not None else np.zeros(len(self), np.int64)

    def usable(self, models: Sequence[str]) -> BoolArray:
        """(len(models), K) mask: class k asks for GPUs and may run on the model."""
        out = np.zeros((len(models), len(self)), np.bool_)
        for j, model in enumerate(models):
            for k, spec in enumerate(self.specs):
                out[j, k] = self.gpu_milli[k] > 0 and bool(model) and (not spec or model in spec)
        return out


def typical_pods(requests: Iterable[ShareRequest], coverage: float = 0.95) -> TypicalPods:
    """The most frequent request shapes covering ``coverage`` of the requests.

    Requests are grouped by (CPU, GPU milli, GPU count, GPU models) -- memory is not part
    of the shape; each class records the median memory of its requests (rounded down) --
    and taken from the most frequent down (ties: larger shape first) until they cover
    ``coverage`` of all requests; their frequencies are renormalised. ``large``: every
    shape of two or more whole GPUs, with its share of the list's GPU demand as weight.
    The same request object listed many times is read once (:func:`typical_pods_counted`).
    """
    listed = list(requests)
    distinct = {id(r): r for r in listed}
    return typical_pods_counted(
        [(distinct[i], n) for i, n in Counter(map(id, listed)).items()], coverage
    )


def typical_pods_counted(
    counted: Iterable[tuple[ShareRequest, int]], coverage: float = 0.95
) -> TypicalPods:
    """:func:`typical_pods` of requests given with their multiplicities: ``(request, n)``
    stands for ``n`` copies of ``request`` (a scheduling round's thousands of jobs ask for a
    few dozen distinct shapes)."""
    if not 0.0 < coverage <= 1.0:
        raise ConfigError(f"coverage must be in (0, 1], got {coverage}")
    counts: Counter[tuple[int, int, int, str]] = Counter()
    memory: dict[tuple[int, int, int, str], list[int]] = {}
    specs: dict[str, frozenset[str]] = {}
    for r, n in counted:
        if n <= 0:
            continue
        spec_key = "|".join(sorted(r.gpu_spec))
        specs[spec_key] = r.gpu_spec
        key = (r.cpu_milli, r.gpu_milli, r.num_gpu, spec_key)
        counts[key] += n
        memory.setdefault(key, []).extend([r.memory_mib] * n)
    total = sum(counts.values())
    if total == 0:
        raise ConfigError("typical pods need at least one request")
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    chosen: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, cnt in ranked:
        if covered >= coverage * total:
            break
        chosen.append((key, cnt))
        covered += cnt
    weight = np.array([c for _, c in chosen], np.float64)
    demand = sum(cnt * key[1] * key[2] for key, cnt in counts.items())  # milli-GPU
    large = [(key, cnt) for key, cnt in ranked if key[2] >= 2 and key[1] == MILLI]

    def classes(
        entries: list[tuple[tuple[int, int, int, str], int]],
        weights: FloatArray,
        large_pods: TypicalPods | None = None,
    ) -> TypicalPods:
        return TypicalPods(
            cpu_milli=np.array([k[0] for k, _ in entries], np.int64),
            gpu_milli=np.array([k[1] for k, _ in entries], np.int64),
            num_gpu=np.array([k[2] for k, _ in entries], np.int64),
            specs=tuple(specs[k[3]] for k, _ in entries),
            weight=weights,
            memory_mib=np.array([int(np.median(memory[k])) for k, _ in entries], np.int64),
            large=large_pods,
        )

    large_weight = np.array([c * k[1] * k[2] / demand for k, c in large], np.float64)
    return classes(chosen, weight / weight.sum(), classes(large, large_weight) if large else None)


def _expected(
    usable: BoolArray,
    cnt: IntArray,
    small: FloatArray,
    total: FloatArray,
    cpu_free: IntArray,
    typical: TypicalPods,
) -> FloatArray:
    """Expected fragment per row from the per-class counts (rows x K arrays)."""
    fits = usable & (cnt >= typical.num_gpu) & (cpu_free[:, None] >= typical.cpu_milli)
    value = np.where(fits, small, total[:, None])
    out: FloatArray = value @ typical.weight
    return out


def _per_class(gpu_free: IntArray, typical: TypicalPods) -> tuple[IntArray, FloatArray]:
    """Per node and class: GPUs with enough free milli, and free milli on the others."""
    g = gpu_free[:, :, None]
    enough = g >= typical.gpu_milli
    cnt: IntArray = enough.sum(axis=1)
    small: FloatArray = np.where(enough, 0, g).sum(axis=1).astype(np.float64)
    return cnt, small


def node_fragmentation(
    cpu_free: IntArray,
    gpu_free: IntArray,
    node_models: Sequence[str],
    typical: TypicalPods,
) -> FloatArray:
    """Expected fragmented milli-GPU of each node against ``typical``.

    ``cpu_free`` (N,), ``gpu_free`` (N, G) free milli per GPU (absent GPUs as 0) and the
    GPU model of each node. The fragmentation score used by FGD; 0 for a full node.
    """
    models = sorted(set(node_models))
    usable = typical.usable(models)[[models.index(m) for m in node_models]]
    cnt, small = _per_class(gpu_free, typical)
    total = gpu_free.sum(axis=1).astype(np.float64)
    return _expected(usable, cnt, small, total, np.asarray(cpu_free), typical)


def cluster_fragmentation(cluster: ShareCluster, typical: TypicalPods) -> tuple[float, float]:
    """(fragmented milli-GPU, free milli-GPU) of the whole cluster now."""
    models = [cluster.models[i] for i in cluster.model_idx]
    frag = node_fragmentation(cluster.cpu_free, cluster.gpu_free, models, typical)
    return float(frag.sum()), float(cluster.gpu_free_total.sum())


class FgdScorer(ShareScorer):
    """Fragmentation Gradient Descent: prefer the placement that adds least fragmentation.

    The score is the drop of the node's fragmentation (milli-GPU). With ``quantize``
    (default) it is mapped like the FGD artifact to ``floor(100 * sigmoid(drop / 1000))``,
    an integer 0..100, so near-equal nodes tie and the tie rank decides. A share goes to
    the GPU of the node with the best score (lowest index on ties).
    """

    name: ClassVar[str] = "fgd"

    def __init__(self, typical: TypicalPods, quantize: bool = True) -> None:
        self.typical = typical
        self.quantize = quantize
        self._cluster: ShareCluster | None = None
        self._luts: dict[int, tuple[IntArray, FloatArray]] = {}
        # per request shape: node scores and the node epochs they were computed at
        self._scores: dict[tuple[int, int, int, frozenset[str]], tuple[FloatArray, IntArray]] = {}

    def sync(self, cluster: ShareCluster) -> None:
        """Refresh the per-cluster caches for the nodes whose epoch changed."""
        if self._cluster is not cluster:
            self._cluster = cluster
            self._usable: BoolArray = self.typical.usable(cluster.models)[cluster.model_idx]
            n, k = len(cluster), len(self.typical)
            self._cnt: IntArray = np.zeros((n, k), np.int64)
            self._small: FloatArray = np.zeros((n, k), np.float64)
            self._total: FloatArray = np.zeros(n, np.float64)
            self._frag: FloatArray = np.zeros(n, np.float64)
            self._epoch: IntArray = np.full(n, -1, np.int64)
            self._scores.clear()
        dirty = np.flatnonzero(cluster.epoch != self._epoch)
        if dirty.size:
            cnt, small = _per_class(cluster.gpu_free[dirty], self.typical)
            total = cluster.gpu_free_total[dirty].astype(np.float64)
            self._cnt[dirty], self._small[dirty], self._total[dirty] = cnt, small, total
            self._frag[dirty] = _expected(
                self._usable[dirty], cnt, small, total, cluster.cpu_free[dirty], self.typical
            )
            self._epoch[dirty] = cluster.epoch[dirty]

    def _lut(self, milli: int) -> tuple[IntArray, FloatArray]:
        """For a share of ``milli`` put on a GPU with v free (row v): the drop of the
        per-class count of fitting GPUs and of the per-class small free milli."""
        lut = self._luts.get(milli)
        if lut is None:
            v = np.arange(MILLI + 1, dtype=np.int64)[:, None]
            after = np.maximum(v - milli, 0)
            m = self.typical.gpu_milli[None, :]
            d_cnt = (v >= m).astype(np.int64) - (after >= m)
            d_small = np.where(v < m, v, 0) - np.where(after < m, after, 0)
            lut = (d_cnt, d_small.astype(np.float64))
            self._luts[milli] = lut
        return lut

    def _to_score(self, drop: FloatArray) -> FloatArray:
        """The drop itself, or with ``quantize`` its artifact score 0..100.

        The drop is rounded to 1e-6 milli-GPU first: it comes from a BLAS dot product whose
        summation order depends on the CPU's kernels, so a drop that is 0 in exact
        arithmetic comes out as +-1e-15..1e-12, and the floor would map a negative
        leftover to 49 instead of 50 and break ties differently on another machine.
        """
        if not self.quantize:
            return drop
        exact = np.round(drop, 6) + 0.0  # + 0.0 turns -0.0 into 0.0
        out: FloatArray = np.floor(100.0 / (1.0 + np.exp(-exact / 1000.0)))
        return out

    def share_drops(
        self, cluster: ShareCluster, request: ShareRequest, rows: IntArray, values: IntArray
    ) -> FloatArray:
        """Fragmentation drop for putting the share on a GPU with ``values`` free on
        node ``rows`` (parallel arrays; call :meth:`sync` first)."""
        d_cnt, d_small = self._lut(request.gpu_milli)
        after = _expected(
            self._usable[rows],
            self._cnt[rows] - d_cnt[values],
            self._small[rows] - d_small[values],
            self._total[rows] - request.gpu_milli,
            cluster.cpu_free[rows] - request.cpu_milli,
            self.typical,
        )
        out: FloatArray = self._frag[rows] - after
        return out

    def score(
        self,
        cluster: ShareCluster,
        request: ShareRequest,
        nodes: IntArray,
        rng: np.random.Generator,
    ) -> FloatArray:
        """Score of each feasible node: best fragmentation drop over its GPUs.

        Scores are cached per request shape and recomputed only for nodes that changed.
        """
        self.sync(cluster)
        key = (request.cpu_milli, request.gpu_milli, request.num_gpu, request.gpu_spec)
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
            pair_score = self._to_score(self.share_drops(cluster, request, nodes[r], srt[r, c]))
            starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
            out: FloatArray = np.maximum.reduceat(pair_score, starts)
            return out
        return self._to_score(self.whole_drops(cluster, request, nodes))

    def whole_drops(
        self, cluster: ShareCluster, request: ShareRequest, nodes: IntArray
    ) -> FloatArray:
        """Fragmentation drop for placing a CPU-only or whole-GPU ``request`` on each of
        ``nodes`` (call :meth:`sync` first)."""
        cpu_after = cluster.cpu_free[nodes] - request.cpu_milli
        cnt = self._cnt[nodes] - request.num_gpu  # whole GPUs: full ones become empty
        total = self._total[nodes] - request.total_gpu_milli
        after = _expected(
            self._usable[nodes], cnt, self._small[nodes], total, cpu_after, self.typical
        )
        out: FloatArray = self._frag[nodes] - after
        return out

    def pick_gpus(
        self,
        cluster: ShareCluster,
        request: ShareRequest,
        node: int,
        rng: np.random.Generator,
    ) -> tuple[int, ...]:
        """For a share, the GPU with the best score (lowest index on ties)."""
        if not request.shared:
            return super().pick_gpus(cluster, request, node, rng)
        self.sync(cluster)
        free = cluster.gpu_free[node]
        gpus = np.flatnonzero(free >= request.gpu_milli)
        rows = np.full(gpus.size, node, np.int64)
        scores = self._to_score(self.share_drops(cluster, request, rows, free[gpus]))
        return (int(gpus[np.argmax(scores)]),)
