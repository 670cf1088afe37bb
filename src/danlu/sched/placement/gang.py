"""Whole-GPU gang placement and memory-sized GPU sharing on a per-round scratch copy.

:class:`FreeMap` is the mutable working copy of free capacity that a policy fills during one
round. It is built from a :class:`~danlu.sched.view.ClusterView` in O(GPUs) numpy work and
answers a placement in O(nodes) numpy work, so a round over thousands of jobs stays fast.

Placement strategies for whole GPUs (all-or-nothing: a job gets every GPU it asks for or none):

- ``best-fit``: the node whose free GPUs fit the job most tightly; if no single node can hold
  it, the fewest nodes (fullest-free first).
- ``first-fit``: nodes in index order.
- ``spread``: one GPU per node on the emptiest nodes (for jobs that want host bandwidth).
- ``worst-fit``: repeatedly the node with the most free GPUs (lowest index on ties), taking as
  many GPUs there as the job still needs -- the Pollux artifact's Tiresias placement.
- ``topology``: fewest racks, then fewest nodes (best-fit inside the chosen rack).

Shared requests (part of one GPU by milli-GPU or by memory) go to the GPU they fit most tightly,
preferring GPUs already in use, so whole GPUs stay free for gang jobs. With ``fgd`` (best-fit
for gangs) they go where the node's fragmentation grows least instead (FGD, ATC'23): the
fragmentation is measured against the request shapes of the jobs in the view. With ``danlu``
(best-fit for gangs) they go where danlu's packing scorer (``danlu sim pack --policy danlu``)
scores best, against the same shapes (:mod:`danlu.sched.placement.share_mirror`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Final

import numpy as np

from danlu.core.cluster import MILLI_PER_GPU, Allocation, GpuShare
from danlu.core.errors import PlacementError, UnknownNameError
from danlu.sched.placement.frag import TypicalPods, node_fragmentation, typical_pods_counted
from danlu.sched.placement.packing_memo import PackingMemo, share_shape
from danlu.sched.placement.share import FloatArray
from danlu.sched.placement.share_mirror import ShareMirror
from danlu.sched.share_size import milli_for_memory
from danlu.sched.view import BoolArray, ClusterView, IntArray, JobRequest

STRATEGIES: Final = ("best-fit", "first-fit", "spread", "topology", "worst-fit", "fgd", "danlu")
_BIG: Final = np.iinfo(np.int64).max // 4


class FreeMap:
    """Free capacity of a cluster during one scheduling round (mutable scratch).

    ``memo``: what the ``fgd`` and ``danlu`` strategies keep across a policy's rounds
    (:class:`~danlu.sched.placement.packing_memo.PackingMemo`, the policy's own); without
    one, the round counts the view's job shapes and builds its scorer afresh."""

    def __init__(
        self, view: ClusterView, strategy: str = "best-fit", memo: PackingMemo | None = None
    ) -> None:
        if strategy not in STRATEGIES:
            raise UnknownNameError("placement", strategy, list(STRATEGIES))
        self.strategy = strategy
        cluster = view.cluster
        self.cluster = cluster
        arrays = cluster.arrays
        self._offsets: IntArray = arrays.offsets
        self._sizes: IntArray = arrays.sizes
        self._gpu_node: IntArray = arrays.gpu_node
        self._gpu_mem_cap: IntArray = arrays.gpu_memory
        used_milli, used_memory = view.usage()
        self.free_milli: IntArray = MILLI_PER_GPU - used_milli
        self.free_memory: IntArray = self._gpu_mem_cap - used_memory
        self._open: BoolArray | None = view.open_gpus()
        """GPUs new work may go on (None: all); the others keep what holds them now."""
        whole = self._whole().astype(np.int64)
        # bincount, not reduceat: reduceat fails on a trailing node without GPUs
        self.node_free: IntArray = np.bincount(
            self._gpu_node, weights=whole, minlength=self._sizes.size
        ).astype(np.int64)
        self.total_free = int(self.node_free.sum())
        room = self.free_milli > 0
        self._gpus_with_room = int((room if self._open is None else room & self._open).sum())
        """GPUs open to new work with some compute left (kept up to date): where a share
        could still go (every share takes compute; one sized by milli alone takes what
        memory is left up to its part, so it needs only some)."""
        self._rack_ids: IntArray = arrays.rack_ids
        self._type_names = arrays.type_names
        self._type_masks: dict[frozenset[str], BoolArray] = {}
        self.reasons: dict[tuple[object, ...], str] = {}
        """Waiting reasons by (GPUs asked, GPUs free[, types, memory]): shared strings for
        this round."""
        self._view = view
        self._memo = memo
        self._typical: TypicalPods | None = None
        self._mirror: ShareMirror | None = None
        """The ``danlu`` strategy's scorer and its copy of the GPUs (built on first use)."""
        self._token = object()
        """This map, to the mirror: the map it last synced in full (a copy has its own)."""
        self._changed_nodes: set[int] = set()
        """Nodes whose GPUs changed since the mirror's last sync with this map (tracked
        once the map has a mirror: its first sync with a map is a full one)."""
        self._buckets: list[list[int]] | None = None
        """Node indices by free whole-GPU count (index), ascending: the best-fit fast path."""
        self._with_room: IntArray | None = None
        """GPUs with compute and memory left when last computed: while capacity only
        shrinks (no release since) a superset of those a shared request that takes compute
        can go on (every share takes some memory), so a shared placement looks at them only
        (a few hundred of 8,000 GPUs on a full cluster). Memory counts: shares sized by
        memory take their compute rounded down, so a GPU whose memory they fill may keep a
        few milli-GPU that no share can use."""
        self._refused_shares: dict[tuple[frozenset[str], bool], list[tuple[int, int]]] = {}
        """Shares refused since the last release, by (GPU types, sized by memory): their
        milli-GPU (0 when sized by memory) and memory. Capacity only shrank since, so a share
        of the same kind needing no less of either is refused at once (queue policies try
        thousands of shares in a round on a full cluster)."""

    def copy(self) -> FreeMap:
        """An independent copy (cheaper than building a new map from the view)."""
        other = object.__new__(FreeMap)
        other.__dict__.update(self.__dict__)
        other.free_milli = self.free_milli.copy()
        other.free_memory = self.free_memory.copy()
        other.node_free = self.node_free.copy()
        other.reasons = {}
        other._refused_shares = {k: list(v) for k, v in self._refused_shares.items()}
        other._token = object()
        other._changed_nodes = set()
        if self._buckets is not None:
            other._buckets = [list(bucket) for bucket in self._buckets]
        return other

    def _whole(self) -> BoolArray:
        """Per GPU, free as a whole: all compute and all memory unused, on a node open to new
        work (:meth:`_apply` tests one GPU the same way, on Python ints)."""
        whole = (self.free_milli >= MILLI_PER_GPU) & (self.free_memory >= self._gpu_mem_cap)
        return whole if self._open is None else whole & self._open

    # -- queries -------------------------------------------------------------------------
    def _node_mask(self, req: JobRequest) -> BoolArray | None:
        if not req.gpu_types:
            return None
        mask = self._type_masks.get(req.gpu_types)
        if mask is None:
            wanted = {t.lower() for t in req.gpu_types}
            mask = np.array([t in wanted for t in self._type_names], dtype=bool)
            self._type_masks[req.gpu_types] = mask
        return mask

    def any_capacity(self) -> bool:
        """Whether any GPU open to new work has any compute left: where a shared request
        could still go (a necessary condition: a share sized by milli alone also needs some
        memory left there, a share sized by memory its memory, see :meth:`_place_shared`)."""
        return self._gpus_with_room > 0

    def closed_free_milli(self) -> int:
        """Milli-GPU free now on the GPUs closed to new work: capacity no job can be given."""
        if self._open is None:
            return 0
        return int(np.clip(self.free_milli[~self._open], 0, None).sum())

    def free_for(self, req: JobRequest) -> int:
        """The free whole GPUs of the types and memory ``req`` asks for (all free whole GPUs
        when it names neither), as :meth:`place` counts them."""
        if not req.gpu_types and not req.gpu_memory:
            return self.total_free
        return int(self._free_nodes_for(req).sum())

    def _free_nodes_for(self, req: JobRequest) -> IntArray:
        """Per node, its free whole GPUs when they are of a type and memory ``req`` may
        have, else 0."""
        free = self.node_free
        mask = self._node_mask(req)
        if mask is not None:
            free = np.where(mask, free, 0)
        if req.gpu_memory:
            free = np.where(self._node_gpu_memory() >= req.gpu_memory, free, 0)
        return free

    def could_fit_now(self, req: JobRequest) -> bool:
        """Cheap necessary condition (enough free whole GPUs in total)."""
        if req.shares_gpu:
            return True
        return self.total_free >= req.gpus

    # -- placement -----------------------------------------------------------------------
    def place(
        self, req: JobRequest, gpus: int | None = None, *, closed: BoolArray | None = None
    ) -> Allocation | None:
        """Find room for ``req`` (``gpus`` overrides the count for elastic jobs), take it, and
        return the allocation; ``None`` (and nothing taken) when it does not fit.
        ``closed``: for a shared request, GPUs (flat index) it may not go on."""
        count = req.gpus if gpus is None else gpus
        if count <= 0:
            return None
        if req.shares_gpu and count == 1:
            return self._place_shared(req, closed)
        if self.total_free < count:
            return None
        if not req.gpu_types and not req.gpu_memory:
            if self.strategy in ("best-fit", "fgd", "danlu"):
                chosen = self._best_fit_buckets(count)
                return None if chosen is None else self._take_nodes(chosen)
            if self.strategy == "worst-fit":
                chosen = self._emptiest_buckets(count)
                return None if chosen is None else self._take_nodes(chosen)
        nodes = self._choose_nodes(self._free_nodes_for(req), count)
        if nodes is None:
            return None
        return self._take_nodes(nodes)

    def take_counts(self, counts: Sequence[tuple[int, int]]) -> Allocation:
        """Take ``count`` idle whole GPUs on each ``(node, count)`` (a placement decided by
        the caller) and return them as one allocation; raises :class:`PlacementError` when a
        node has fewer idle GPUs."""
        return self._take_nodes(list(counts))

    def _take_nodes(self, nodes: list[tuple[int, int]]) -> Allocation:
        """Take ``count`` idle GPUs on each ``(node, count)``, in that order."""
        shares: list[GpuShare] = []
        for node, take in nodes:
            start = int(self._offsets[node])
            end = start + int(self._sizes[node])
            # Plain lists: a node has a handful of GPUs, too few for numpy to pay off.
            milli = self.free_milli[start:end].tolist()
            memory = self.free_memory[start:end].tolist()
            capacity = self._gpu_mem_cap[start:end].tolist()
            opened: list[bool] = (
                [True] * (end - start) if self._open is None else self._open[start:end].tolist()
            )
            idle = [
                gpu
                for gpu, (m, mem, cap, ok) in enumerate(
                    zip(milli, memory, capacity, opened, strict=True)
                )
                if m >= MILLI_PER_GPU and mem >= cap and ok
            ][:take]
            if len(idle) < take:
                raise PlacementError(f"node {node} has {len(idle)} idle GPUs, {take} asked")
            for gpu in idle:
                shares.append(GpuShare(node, gpu, MILLI_PER_GPU, memory[gpu]))
                # Idle GPUs taken whole: nothing of them is left.
                self.free_milli[start + gpu] = 0
                self.free_memory[start + gpu] = 0
            self._gpus_with_room -= len(idle)  # idle GPUs had all their compute
            self._whole_gpus_changed(node, -take)
            if self._mirror is not None:  # as :meth:`_apply` marks them
                self._changed_nodes.add(node)
        return Allocation(tuple(shares))

    def _node_buckets(self) -> list[list[int]]:
        """Node indices by free whole-GPU count, each list ascending (built on first use)."""
        buckets = self._buckets
        if buckets is None:
            buckets = [[] for _ in range(int(self._sizes.max(initial=0)) + 1)]
            for node, free in enumerate(self.node_free.tolist()):
                if free > 0:
                    buckets[free].append(node)
            self._buckets = buckets
        return buckets

    def _emptiest_buckets(self, count: int) -> list[tuple[int, int]] | None:
        """Worst-fit without constraints: the nodes with the most idle GPUs first (lowest
        index first among equals), as :func:`_emptiest_first` picks them."""
        buckets = self._node_buckets()
        chosen: list[tuple[int, int]] = []
        need = count
        for size in range(len(buckets) - 1, 0, -1):
            for node in buckets[size]:
                take = min(need, size)
                chosen.append((node, take))
                need -= take
                if need == 0:
                    return chosen
        return None

    def _best_fit_buckets(self, count: int) -> list[tuple[int, int]] | None:
        """Best-fit without constraints, in pure Python (no per-call numpy overhead)."""
        buckets = self._node_buckets()
        for size in range(count, len(buckets)):
            if buckets[size]:
                return [(buckets[size][0], count)]
        return self._emptiest_buckets(count)  # no single node: fewest nodes, fullest first

    def _node_gpu_memory(self) -> IntArray:
        """Per node, the memory of one of its GPUs (a node's GPUs are all of its type); 0 on
        a node without GPUs, whose offset may be past the last GPU."""
        if not self._gpu_mem_cap.size:
            return np.zeros_like(self._offsets)
        index = np.minimum(self._offsets, self._gpu_mem_cap.size - 1)
        return np.where(self._sizes > 0, self._gpu_mem_cap[index], 0)

    def _choose_nodes(self, free: IntArray, count: int) -> list[tuple[int, int]] | None:
        if int(free.sum()) < count:
            return None
        strategy = self.strategy
        if strategy == "first-fit":
            fitting = np.flatnonzero(free >= count)
            if fitting.size:
                return [(int(fitting[0]), count)]
            return _take_in_order(np.flatnonzero(free > 0), free, count)
        if strategy == "spread":
            order = np.lexsort((np.arange(free.size), -free))
            order = order[free[order] > 0]
            if order.size >= count:
                return [(int(n), 1) for n in order[:count]]
            return _take_round_robin(order, free, count)
        if strategy == "worst-fit":
            return _emptiest_first(free, count)
        single = _best_single(free, count)
        if single is not None:
            return [(single, count)]
        if strategy == "topology":
            return self._by_rack(free, count)
        order = np.lexsort((np.arange(free.size), -free))
        return _take_in_order(order[free[order] > 0], free, count)

    def _by_rack(self, free: IntArray, count: int) -> list[tuple[int, int]] | None:
        rack_free = np.bincount(self._rack_ids, weights=free).astype(np.int64)
        fitting = np.flatnonzero(rack_free >= count)
        racks: list[int]
        if fitting.size:
            racks = [int(fitting[np.argmin(rack_free[fitting])])]
        else:
            racks = np.argsort(-rack_free, kind="stable").tolist()
        # Each chosen rack's nodes, fullest-free first, racks in the order chosen above.
        order = [
            in_rack[np.argsort(-free[in_rack], kind="stable")]
            for in_rack in (np.flatnonzero((self._rack_ids == r) & (free > 0)) for r in racks)
        ]
        return _take_in_order(np.concatenate(order), free, count)

    def _place_shared(self, req: JobRequest, closed: BoolArray | None = None) -> Allocation | None:
        """Place a request for part of one GPU (tightest fit), or None.

        A share sized by memory alone takes compute in proportion to its memory, rounded down
        and at least 1 milli-GPU (:func:`~danlu.sched.share_size.milli_for_memory`, as the
        quotas count it): shares whose memory fits a GPU fit on its compute too. A share that
        names no memory (``gpu_memory`` 0) is sized by its milli-GPU and takes memory in
        proportion to it, rounded down (:meth:`JobRequest.memory_on`; what the GPU has left
        when less, as beside a share that named more memory than its compute's part): shares
        whose milli sum to a GPU never take more than its memory, and each is capped to its
        part (``DANLU_GPU_MEMORY_LIMIT``) like any share. Such a share goes only where some
        memory is left: with none its share would be memory 0, which an executor reads as
        the whole GPU (an uncapped slot that never launches beside the share holding the
        GPU).
        """
        by_memory = req.gpu_milli >= MILLI_PER_GPU and req.gpu_memory > 0
        kind = (req.gpu_types, by_memory)
        size = (0 if by_memory else min(req.gpu_milli, MILLI_PER_GPU), req.gpu_memory)
        if closed is None:  # refused already: a share needing no more, since no release
            refused = self._refused_shares.get(kind, ())
            if any(size[0] >= milli and size[1] >= memory for milli, memory in refused):
                return None
        if by_memory or size[0] > 0:  # it takes compute: only GPUs with room can take it
            if self._with_room is None:
                self._with_room = np.flatnonzero((self.free_milli > 0) & (self.free_memory > 0))
            gpus = self._with_room
        else:
            gpus = np.arange(self.free_milli.size)
        # the compute it takes on each of ``gpus`` (by memory: in proportion to theirs)
        need: IntArray | int = (
            milli_for_memory(req.gpu_memory, self._gpu_mem_cap[gpus]) if by_memory else size[0]
        )
        least_memory = max(req.gpu_memory, 1)  # a share without memory: some left, see above
        fits = (self.free_milli[gpus] >= need) & (self.free_memory[gpus] >= least_memory)
        mask = self._node_mask(req)
        if mask is not None:
            fits &= mask[self._gpu_node[gpus]]
        if closed is not None:
            fits &= ~closed[gpus]
        if self._open is not None:
            fits &= self._open[gpus]
        candidates = gpus[fits]
        if candidates.size == 0:
            if closed is None:
                self._refused_shares.setdefault(kind, []).append(size)
            return None
        # Tightest fit first: least memory left, then least compute left, then lowest index.
        need_at = need[fits] if isinstance(need, np.ndarray) else need
        left_mem = self.free_memory[candidates] - req.gpu_memory
        left_milli = self.free_milli[candidates] - need_at
        if self.strategy == "fgd":
            growth = self._fragmentation_growth(candidates, need_at, req)
            pick = int(np.lexsort((candidates, left_milli, growth))[0])
        elif self.strategy == "danlu":
            score = self._packing_scores(candidates, need_at, req)
            pick = int(np.lexsort((candidates, left_milli, -score))[0])
        else:
            pick = int(np.lexsort((candidates, left_milli, left_mem))[0])
        best = candidates[pick]
        milli = int(need_at[pick]) if isinstance(need_at, np.ndarray) else need_at
        node = int(self._gpu_node[best])
        # a milli share's part of the memory (JobRequest.memory_on, as the quotas count it)
        memory = req.gpu_memory or min(
            int(self.free_memory[best]), req.memory_on(int(self._gpu_mem_cap[best]))
        )
        alloc = Allocation((GpuShare(node, int(best - self._offsets[node]), milli, memory),))
        self.take(alloc)
        return alloc

    def _packing_memo(self) -> PackingMemo:
        """The memo the round was given, or one of its own (made on first use)."""
        if self._memo is None:
            self._memo = PackingMemo()
        return self._memo

    def _typical_pods(self, req: JobRequest) -> TypicalPods:
        """The request shapes of the jobs in the view (of ``req`` alone in a view without
        jobs: a request placed on an idle snapshot)."""
        if self._typical is None:
            typical = self._packing_memo().typical(self._view)
            self._typical = typical or typical_pods_counted([(share_shape(req), 1)])
        return self._typical

    def _packing_scores(self, gpus: IntArray, need: IntArray | int, req: JobRequest) -> FloatArray:
        """danlu's packing score (higher is better) of the share on each candidate GPU."""
        if self._mirror is None:
            typical = self._typical_pods(req)
            memo = self._packing_memo()
            self._mirror = memo.mirror(self._offsets, self._sizes, self._type_names, typical)
        mirror = self._mirror
        if mirror.synced_with is not self._token:  # another round's map, or a copy's
            mirror.sync(self.free_milli, self._open)
            mirror.synced_with = self._token
        elif self._changed_nodes:
            changed = np.fromiter(self._changed_nodes, np.int64, len(self._changed_nodes))
            mirror.sync(self.free_milli, self._open, np.sort(changed))
        self._changed_nodes.clear()
        nodes = self._gpu_node[gpus]
        if not isinstance(need, np.ndarray):
            return self._mirror.scores(gpus, nodes, int(need))
        scores = np.empty(gpus.size, dtype=np.float64)
        for value in np.unique(need).tolist():  # GPUs of other memory sizes: other shares
            where = need == value
            scores[where] = self._mirror.scores(gpus[where], nodes[where], int(value))
        return scores

    def _fragmentation_growth(
        self, gpus: IntArray, need: IntArray | int, req: JobRequest
    ) -> FloatArray:
        """How much each candidate GPU's node fragmentation grows if the share lands there."""
        typical = self._typical_pods(req)
        nodes = self._gpu_node[gpus]
        width = int(self._sizes.max())
        local = gpus - self._offsets[nodes]
        before = np.zeros((gpus.size, width), dtype=np.int64)
        for column in range(width):
            present = column < self._sizes[nodes]
            index = np.where(present, self._offsets[nodes] + column, 0)
            before[:, column] = np.where(present, self.free_milli[index], 0)
        after = before.copy()
        after[np.arange(gpus.size), local] -= need
        cpu = np.full(gpus.size, np.iinfo(np.int64).max // 2, dtype=np.int64)
        models = [self._type_names[n] for n in nodes.tolist()]
        growth: FloatArray = node_fragmentation(cpu, after, models, typical) - node_fragmentation(
            cpu, before, models, typical
        )
        return growth

    # -- bookkeeping ---------------------------------------------------------------------
    def can_take(self, alloc: Allocation) -> bool:
        """Whether every share of ``alloc`` is free right now."""
        need_milli: dict[int, int] = {}
        need_memory: dict[int, int] = {}
        for share in alloc.shares:
            index = int(self._offsets[share.node]) + share.gpu
            need_milli[index] = need_milli.get(index, 0) + share.milli
            need_memory[index] = need_memory.get(index, 0) + share.memory
        return all(
            self.free_milli[i] >= need_milli[i] and self.free_memory[i] >= need_memory[i]
            for i in need_milli
        )

    def take(self, alloc: Allocation) -> None:
        """Mark ``alloc`` as used. Raises :class:`PlacementError` on over-allocation."""
        self._apply(alloc, -1)

    def release(self, alloc: Allocation) -> None:
        """Give ``alloc`` back."""
        self._apply(alloc, +1)

    def _apply(self, alloc: Allocation, sign: int) -> None:
        if sign > 0:
            self._with_room = None  # GPUs may have room again
            if self._refused_shares:
                self._refused_shares = {}
        free_milli, free_memory, opened = self.free_milli, self.free_memory, self._open
        for share in alloc.shares:
            index = int(self._offsets[share.node]) + share.gpu
            if self._mirror is not None:
                self._changed_nodes.add(share.node)
            # :meth:`_whole` for one GPU, on Python ints: numpy's scalar operations cost a
            # microsecond each, and a round may release or take thousands of allocations
            milli, memory = int(free_milli[index]), int(free_memory[index])
            cap = int(self._gpu_mem_cap[index])
            open_ = opened is None or bool(opened[index])
            was_whole = milli >= MILLI_PER_GPU and memory >= cap and open_
            had_room = milli > 0
            milli += sign * share.milli
            memory += sign * share.memory
            if milli < 0 or memory < 0:
                raise PlacementError(
                    f"GPU {share.gpu} of node {share.node} over-allocated: "
                    f"{-milli} milli, {-memory} bytes"
                )
            free_milli[index], free_memory[index] = milli, memory
            is_whole = milli >= MILLI_PER_GPU and memory >= cap and open_
            has_room = milli > 0
            if had_room != has_room and open_:
                self._gpus_with_room += 1 if has_room else -1
            if was_whole != is_whole:
                self._whole_gpus_changed(share.node, 1 if is_whole else -1)

    def _whole_gpus_changed(self, node: int, delta: int) -> None:
        """Count ``delta`` more idle GPUs on ``node`` (negative: fewer)."""
        old = int(self.node_free[node])
        self.node_free[node] = old + delta
        self.total_free += delta
        if self._buckets is not None:
            if old > 0:
                self._buckets[old].remove(node)
            if old + delta > 0:
                bisect.insort(self._buckets[old + delta], node)


def _emptiest_first(free: IntArray, count: int) -> list[tuple[int, int]] | None:
    left = free.copy()
    chosen: list[tuple[int, int]] = []
    need = count
    while need:
        node = int(np.argmax(left))
        if left[node] <= 0:
            return None
        take = min(need, int(left[node]))
        chosen.append((node, take))
        left[node] -= take
        need -= take
    return chosen


def _best_single(free: IntArray, count: int) -> int | None:
    fitting = np.where(free >= count, free, _BIG)
    node = int(np.argmin(fitting))
    return node if fitting[node] < _BIG else None


def _take_in_order(order: IntArray, free: IntArray, count: int) -> list[tuple[int, int]] | None:
    chosen: list[tuple[int, int]] = []
    need = count
    for node in order.tolist():
        take = min(need, int(free[node]))
        chosen.append((node, take))
        need -= take
        if need == 0:
            return chosen
    return None


def _take_round_robin(order: IntArray, free: IntArray, count: int) -> list[tuple[int, int]] | None:
    taken = dict.fromkeys(order.tolist(), 0)
    need = count
    while need:
        progressed = False
        for node in taken:
            if taken[node] < free[node] and need:
                taken[node] += 1
                need -= 1
                progressed = True
        if not progressed:
            return None
    return [(node, n) for node, n in taken.items() if n]
