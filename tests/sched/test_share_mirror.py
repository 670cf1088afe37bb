"""The ``danlu`` placement strategy: a share goes where danlu's packing scorer (the one of
``danlu sim pack --policy danlu``) scores best, on a copy of the round's free map."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, GpuShare, Node
from danlu.sched.placement.danlu_pack import DanluPackScorer
from danlu.sched.placement.frag import typical_pods
from danlu.sched.placement.gang import FreeMap
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.placement.share import Placement, ShareCluster, ShareNode, ShareRequest
from danlu.sched.placement.share_mirror import ShareMirror
from danlu.sched.registry import default_registry
from danlu.sched.view import ClusterView, JobRequest, JobStatus

GiB = 1024**3


def _request(job_id: str, seq: int = 0, **kw: Any) -> JobRequest:
    return JobRequest(id=job_id, submit_time=float(seq), gpus=1, seq=seq, **kw)


HELD = {(0, 0): 600, (0, 1): 250, (1, 2): 300, (1, 3): 800}
"""Milli-GPU the running shares hold, by (node, GPU)."""


def _view(
    held: dict[tuple[int, int], int] = HELD, shapes: tuple[int, ...] = (400, 500, 200)
) -> ClusterView:
    """Two nodes of four 80 GiB GPUs: shares ``held`` running, shares ``shapes`` waiting."""
    running = tuple(
        JobStatus(
            _request(f"r{i}", i, gpu_milli=milli),
            Allocation((GpuShare(node, gpu, milli, milli * 80 * GiB // 1000),)),
        )
        for i, ((node, gpu), milli) in enumerate(held.items())
    )
    pending = tuple(JobStatus(_request(f"p{i}", 10 + i, gpu_milli=m)) for i, m in enumerate(shapes))
    return ClusterView(0.0, Cluster.homogeneous(2, 4), running=running, pending=pending)


def _scorer_choice(
    view: ClusterView, need: int, held: dict[tuple[int, int], int] = HELD
) -> tuple[int, int]:
    """The (node, GPU) the packing scorer itself ranks first for a share of ``need``, on a
    cluster built from the view by hand (ties: least left, then lowest flat index)."""
    shapes = [
        ShareRequest(cpu_milli=0, num_gpu=1, gpu_milli=j.request.gpu_milli)
        for j in (*view.pending, *view.running)
    ]
    scorer = DanluPackScorer(typical_pods(shapes))
    nodes = [ShareNode(f"n{i}", 1 << 40, 1 << 40, 4, "generic") for i in range(2)]
    cluster = ShareCluster(nodes, scorer)
    for (node, gpu), milli in held.items():
        cluster.apply(Placement(node, (gpu,), ShareRequest(0, num_gpu=1, gpu_milli=milli)))
    rows, cols = np.nonzero(cluster.gpu_free >= need)
    request = ShareRequest(0, num_gpu=1, gpu_milli=need)
    scores = scorer.share_scores(cluster, request, rows, cluster.gpu_free[rows, cols])
    left = cluster.gpu_free[rows, cols] - need
    best = np.lexsort((rows * 4 + cols, left, -scores))[0]
    return int(rows[best]), int(cols[best])


@pytest.mark.parametrize("need", [200, 350, 400, 500])
def test_a_share_goes_where_the_packing_scorer_ranks_first(need: int) -> None:
    view = _view()
    placed = FreeMap(view, "danlu").place(_request("new", 99, gpu_milli=need))
    assert placed is not None
    (share,) = placed.shares
    assert (share.node, share.gpu) == _scorer_choice(view, need)
    assert share.milli == need


def test_it_can_choose_otherwise_than_best_fit() -> None:
    """A share of 200 beside one of 600 on a GPU, with 400, 200 and 200 waiting: best-fit
    fills that GPU (leaving 200); the packing scorer keeps its 400 for the waiting 400 and
    takes an idle GPU, where the two 200s and more fit."""
    held = {(1, 3): 600}
    view = _view(held, (400, 200, 200))
    chosen = {
        strategy: FreeMap(view, strategy).place(_request("new", 99, gpu_milli=200))
        for strategy in ("best-fit", "danlu")
    }
    where = {k: (a.shares[0].node, a.shares[0].gpu) for k, a in chosen.items() if a is not None}
    assert where["best-fit"] == (1, 3)
    assert where["danlu"] == _scorer_choice(view, 200, held) != (1, 3)


def test_the_copy_follows_the_free_map_and_marks_only_changed_nodes() -> None:
    free = FreeMap(_view(), "danlu")
    assert free.place(_request("a", 99, gpu_milli=200)) is not None
    mirror = free._mirror
    assert mirror is not None

    def synced() -> list[int]:
        """Sync the copy (as each share placement does first); the nodes it marks changed."""
        epochs = mirror.cluster.epoch.copy()
        mirror.sync(free.free_milli, free._open)
        assert mirror.cluster.gpu_free.reshape(-1).tolist() == free.free_milli.tolist()
        assert mirror.cluster.n_full.tolist() == free.node_free.tolist()
        return np.flatnonzero(mirror.cluster.epoch != epochs).tolist()

    share_node = free.place(_request("b", 100, gpu_milli=100))
    assert share_node is not None
    assert synced() == [share_node.shares[0].node]
    whole = free.place(JobRequest(id="w", submit_time=0.0, gpus=2, seq=101))
    assert whole is not None
    (node,) = {s.node for s in whole.shares}
    assert synced() == [node]
    assert synced() == []  # nothing changed since
    free.release(whole)
    assert synced() == [node]


def test_kept_scores_equal_fresh_ones_after_takes_and_releases() -> None:
    """A GPU's score is kept per share size until its node changes: after random takes and
    releases, the kept scores are those a new copy computes from scratch (the host-reserve
    cost of the waiting 2-GPU job's shape included, which changes with every node)."""
    rng = np.random.default_rng(7)
    view = _view()
    wide = JobStatus(JobRequest(id="wide", submit_time=0.0, gpus=2, seq=50))
    free = FreeMap(replace(view, pending=(*view.pending, wide)), "danlu")
    placed: list[Allocation] = []
    for step in range(60):
        if placed and rng.random() < 0.3:
            free.release(placed.pop(int(rng.integers(len(placed)))))
        else:
            need = int(rng.choice([100, 250, 400, 500]))
            alloc = free.place(_request(f"s{step}", 100 + step, gpu_milli=need))
            if alloc is not None:
                placed.append(alloc)
        mirror = free._mirror
        assert mirror is not None and mirror.scorer.reserve is not None  # the wide job's
        mirror.sync(free.free_milli, free._open)
        assert free._typical is not None
        fresh = ShareMirror(free._offsets, free._sizes, list(free._type_names), free._typical)
        fresh.sync(free.free_milli, free._open)
        for need in (100, 250, 400, 500):
            gpus = np.flatnonzero(free.free_milli >= need)
            nodes = free._gpu_node[gpus]
            assert mirror.scores(gpus, nodes, need).tolist() == (
                fresh.scores(gpus, nodes, need).tolist()
            )


def test_memory_sized_shares_fit_their_memory() -> None:
    view = _view()
    # 40 GiB of an 80 GiB GPU: 500 milli; GPU (0, 0) has 400 milli and 32 GiB left
    placed = FreeMap(view, "danlu").place(_request("mem", 99, gpu_memory=40 * GiB))
    assert placed is not None
    (share,) = placed.shares
    assert share.memory == 40 * GiB and share.milli == 500
    assert (share.node, share.gpu) == _scorer_choice(view, 500)
    assert (share.node, share.gpu) not in {(0, 0), (1, 3)}


def test_the_strategy_is_a_policy_option() -> None:
    registry = default_registry()
    for name in ("danlu", "priority", "fifo"):
        policy = registry.create(name, placement="danlu")
        plan = policy.schedule(_view())
        assert {s.job_id for s in plan.starts} == {"p0", "p1", "p2"}


def test_a_map_syncs_only_the_nodes_it_changed_and_a_copy_syncs_in_full() -> None:
    """Between its shares a free map hands the mirror only the nodes it changed; a copy of
    the map (or the next round's map) shares the mirror and syncs it in full first. After
    every share placed, by the map or by its copies in turn, the mirror holds that map's
    free compute."""
    rng = np.random.default_rng(3)
    view = _view(shapes=(400, 500, 200, 250, 100))
    maps = [FreeMap(view, "danlu", PackingMemo())]
    placed: list[tuple[FreeMap, Allocation]] = []
    for step in range(80):
        free = maps[int(rng.integers(len(maps)))]
        roll = rng.random()
        if roll < 0.1:
            maps.append(free.copy())
            continue
        if roll < 0.35:
            mine = [i for i, (m, _) in enumerate(placed) if m is free]
            if mine:
                free.release(placed.pop(mine[int(rng.integers(len(mine)))])[1])
            elif (
                whole := free.place(JobRequest(id=f"w{step}", submit_time=0.0, gpus=1))
            ) is not None:
                placed.append((free, whole))
            continue
        need = int(rng.choice([100, 250, 400, 500]))
        alloc = free.place(_request(f"s{step}", 100 + step, gpu_milli=need))
        if alloc is None:
            continue
        placed.append((free, alloc))
        mirror = free._mirror
        assert mirror is not None and mirror is maps[0]._mirror
        # the mirror synced before the choice; the share just taken is the one change since
        expected = np.clip(free.free_milli, 0, 1000)
        expected[free._offsets[alloc.shares[0].node] + alloc.shares[0].gpu] += need
        assert mirror.cluster.gpu_free.reshape(-1).tolist() == expected.tolist()


@pytest.mark.parametrize("how", ["place", "take_counts"])
def test_whole_gpus_taken_are_synced_before_the_next_share(how: str) -> None:
    """A gang of whole GPUs (placed, or taken as counts a policy chose) changes its nodes for
    the mirror as a share does: the next share is scored on the map as it is, not on the
    GPUs as they were before the gang took them."""
    free = FreeMap(_view(), "danlu")
    assert free.place(_request("a", 99, gpu_milli=200)) is not None
    mirror = free._mirror
    assert mirror is not None
    if how == "place":
        whole = free.place(JobRequest(id="w", submit_time=0.0, gpus=3, seq=101))
        assert whole is not None
    else:
        whole = free.take_counts([(1, 1), (0, 1)])
    alloc = free.place(_request("b", 102, gpu_milli=100))
    assert alloc is not None
    expected = np.clip(free.free_milli, 0, 1000)
    expected[free._offsets[alloc.shares[0].node] + alloc.shares[0].gpu] += 100
    assert mirror.cluster.gpu_free.reshape(-1).tolist() == expected.tolist()


def test_share_choices_equal_those_of_a_mirror_synced_in_full() -> None:
    """Shares and gangs placed in turn on random clusters: every share goes where it goes
    on a map whose mirror is synced in full before each share (the true state)."""

    def choices(seed: int, full: bool) -> list[tuple[tuple[int, int, int], ...] | None]:
        rng = np.random.default_rng(seed)
        nodes = int(rng.integers(2, 6))
        cluster = Cluster(
            tuple(
                Node(f"n{i}", int(rng.choice([2, 4, 8])), GPU_TYPES["A100-80GB"])
                for i in range(nodes)
            )
        )
        requests = [
            _request(f"s{i}", i, gpu_milli=int(rng.choice([200, 300, 500, 700])))
            if rng.random() < 0.6
            else JobRequest(id=f"w{i}", submit_time=0.0, gpus=int(rng.integers(1, 5)), seq=i)
            for i in range(40)
        ]
        free = FreeMap(ClusterView(0.0, cluster, pending=tuple(map(JobStatus, requests))), "danlu")
        out: list[tuple[tuple[int, int, int], ...] | None] = []
        for request in requests:
            if full and free._mirror is not None:
                free._mirror.synced_with = None  # sync in full before this placement
            alloc = free.place(request)
            out.append(
                None if alloc is None else tuple((s.node, s.gpu, s.milli) for s in alloc.shares)
            )
        return out

    for seed in range(40):
        assert choices(seed, False) == choices(seed, True), seed
