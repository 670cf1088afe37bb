"""Gang placement on a FreeMap: strategies, GPU types, memory-sized sharing, invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.cluster import (
    MILLI_PER_GPU,
    Allocation,
    Cluster,
    GpuShare,
    GpuType,
    Node,
    gpu_type,
)
from danlu.core.errors import PlacementError, UnknownNameError
from danlu.core.units import GiB
from danlu.sched.placement.gang import STRATEGIES, FreeMap
from danlu.sched.view import ClusterView, JobRequest, JobStatus, usage_from_allocations


def req(gpus: int = 1, **kw: object) -> JobRequest:
    return JobRequest(id=str(kw.pop("id", "j")), submit_time=0.0, gpus=gpus, **kw)  # type: ignore[arg-type]


def busy(used: list[int]) -> tuple[JobStatus, ...]:
    """Running jobs occupying the first ``used[n]`` GPUs of node n."""
    jobs = []
    for node, count in enumerate(used):
        if count:
            alloc = Allocation.whole_gpus([(node, g) for g in range(count)])
            jobs.append(JobStatus(req(count, id=f"busy-{node}"), alloc))
    return tuple(jobs)


def freemap(cluster: Cluster, used: list[int] | None = None, strategy: str = "best-fit") -> FreeMap:
    view = ClusterView(0.0, cluster, running=busy(used or []))
    return FreeMap(view, strategy)


def picked(alloc: Allocation | None) -> list[tuple[int, int]]:
    """(node, GPUs) in the order the placement picked the nodes."""
    assert alloc is not None
    order = list(dict.fromkeys(s.node for s in alloc.shares))
    return list(zip(order, alloc.node_counts(), strict=True))


C3x4 = Cluster.homogeneous(3, 4)


def test_freemap_reads_usage_from_the_view() -> None:
    free = freemap(C3x4, [0, 2, 1])
    assert free.node_free.tolist() == [4, 2, 3]
    assert free.total_free == 9
    assert free.free_milli.tolist() == [1000] * 4 + [0, 0, 1000, 1000] + [0] + [1000] * 3


def test_unknown_strategy_lists_the_strategies() -> None:
    with pytest.raises(UnknownNameError) as info:
        freemap(C3x4, strategy="tightest")
    for name in STRATEGIES:
        assert name in str(info.value)


def test_best_fit_picks_the_tightest_node() -> None:
    free = freemap(C3x4, [0, 2, 1])  # free 4, 2, 3
    assert picked(free.place(req(2))) == [(1, 2)]
    free = freemap(C3x4, [0, 2, 1])
    assert picked(free.place(req(3))) == [(2, 3)]
    free = freemap(C3x4, [0, 2, 1])
    assert picked(free.place(req(1))) == [(1, 1)]
    # no single node fits 5: fewest nodes, fullest-free first
    free = freemap(C3x4, [0, 2, 1])
    assert picked(free.place(req(5))) == [(0, 4), (2, 1)]


def test_best_fit_takes_idle_gpus_only() -> None:
    free = freemap(C3x4, [0, 2, 1])
    alloc = free.place(req(2))
    assert alloc is not None
    assert [(s.node, s.gpu) for s in alloc.shares] == [(1, 2), (1, 3)]
    assert all(s.milli == MILLI_PER_GPU for s in alloc.shares)
    assert free.node_free.tolist() == [4, 0, 3] and free.total_free == 7


def test_first_fit_takes_nodes_in_index_order() -> None:
    free = freemap(C3x4, [0, 2, 1], "first-fit")
    assert picked(free.place(req(2))) == [(0, 2)]
    free = freemap(C3x4, [1, 2, 0], "first-fit")
    assert picked(free.place(req(4))) == [(2, 4)]  # first node that holds it alone
    free = freemap(C3x4, [1, 2, 0], "first-fit")
    free.place(req(4))
    assert picked(free.place(req(5))) == [(0, 3), (1, 2)]


def test_spread_one_gpu_per_node_emptiest_first() -> None:
    cluster = Cluster.homogeneous(4, 4)
    free = freemap(cluster, [0, 2, 1, 0], "spread")  # free 4, 2, 3, 4
    assert picked(free.place(req(3))) == [(0, 1), (3, 1), (2, 1)]
    # more GPUs than nodes: round-robin over the nodes
    free = freemap(cluster, [0, 2, 1, 0], "spread")
    alloc = free.place(req(6))
    assert alloc is not None and sorted(alloc.per_node()) == [1, 1, 2, 2]


def test_topology_keeps_a_gang_in_one_rack() -> None:
    cluster = Cluster.homogeneous(4, 4, nodes_per_rack=2)  # racks {0,1} {2,3}
    used = [2, 0, 1, 0]  # free 2, 4, 3, 4: rack-0 has 6, rack-1 has 7
    best = freemap(cluster, used).place(req(6))
    assert picked(best) == [(1, 4), (3, 2)]  # best-fit crosses racks
    topo = freemap(cluster, used, "topology").place(req(6))
    assert picked(topo) == [(1, 4), (0, 2)]  # the tightest rack that holds it
    # a gang that fits one node still takes the tightest node
    assert picked(freemap(cluster, used, "topology").place(req(3))) == [(2, 3)]
    # no rack holds 9: the racks with the most free GPUs first
    alloc = freemap(cluster, used, "topology").place(req(9))
    assert alloc is not None and alloc.num_gpus == 9
    assert picked(alloc)[:2] == [(3, 4), (2, 3)]


def test_worst_fit_takes_the_emptiest_node_first_and_keeps_pick_order() -> None:
    cluster = Cluster.homogeneous(4, 4)
    free = freemap(cluster, [1, 3, 0, 2], "worst-fit")  # free 3, 1, 4, 2
    alloc = free.place(req(5))
    assert picked(alloc) == [(2, 4), (0, 1)]
    assert alloc is not None
    assert [s.node for s in alloc.shares] == [2, 2, 2, 2, 0]  # pick order, not sorted
    assert alloc.node_counts() == (4, 1)
    # worst-fit spreads even a job that one node could hold
    free = freemap(cluster, [1, 3, 0, 2], "worst-fit")
    assert picked(free.place(req(2))) == [(2, 2)]
    assert picked(free.place(req(2))) == [(0, 2)]  # now free 3, 1, 2, 2: node 0
    # ties go to the lowest index
    assert picked(freemap(cluster, [], "worst-fit").place(req(6))) == [(0, 4), (1, 2)]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gang_is_all_or_nothing(strategy: str) -> None:
    free = freemap(C3x4, [3, 3, 3], strategy)  # 3 free GPUs in all
    before = free.free_milli.copy()
    assert free.place(req(4)) is None
    assert np.array_equal(free.free_milli, before) and free.total_free == 3
    alloc = free.place(req(3))
    assert alloc is not None and alloc.num_gpus == 3 and free.total_free == 0
    assert free.place(req(0)) is None


def test_gpu_type_constraints() -> None:
    cluster = Cluster(
        (Node("t4", 2, gpu_type("T4")), Node("h100", 4, gpu_type("H100"), rack="rack-1"))
    )
    assert picked(freemap(cluster).place(req(2))) == [(0, 2)]  # tightest
    assert picked(freemap(cluster).place(req(2, gpu_types=frozenset({"H100"})))) == [(1, 2)]
    assert picked(freemap(cluster).place(req(2, gpu_types=frozenset({"h100"})))) == [(1, 2)]
    both = frozenset({"T4", "H100"})
    assert freemap(cluster).place(req(6, gpu_types=both)) is not None
    assert freemap(cluster).place(req(3, gpu_types=frozenset({"T4"}))) is None
    assert freemap(cluster).place(req(1, gpu_types=frozenset({"A10"}))) is None
    # per-GPU memory for whole GPUs: only nodes whose GPUs are big enough
    assert picked(freemap(cluster).place(req(2, gpu_memory=40 * GiB))) == [(1, 2)]
    # a shared request honours the types too
    shared = freemap(cluster).place(req(1, gpu_memory=4 * GiB, gpu_types=frozenset({"H100"})))
    assert shared is not None and shared.shares[0].node == 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_memory_sized_gang_skips_nodes_without_gpus(strategy: str) -> None:
    # a node without GPUs last (its offset is past the last GPU) or between GPU nodes
    a100 = gpu_type("A100-80GB")
    for nodes in (
        (Node("gpu-0", 4, a100), Node("cpu-0", 0)),
        (Node("cpu-0", 0), Node("gpu-0", 4, a100), Node("cpu-1", 0)),
        (Node("gpu-0", 2, a100), Node("cpu-0", 0), Node("gpu-1", 2, a100)),
    ):
        cluster = Cluster(nodes)
        alloc = freemap(cluster, strategy=strategy).place(req(4, gpu_memory=40 * GiB))
        assert alloc is not None and alloc.num_gpus == 4
        assert all(cluster.nodes[s.node].gpus > 0 for s in alloc.shares)


def test_memory_sized_sharing_packs_while_memory_fits() -> None:
    cluster = Cluster.homogeneous(1, 2, "H100")  # 2 x 80 GiB
    free = freemap(cluster)
    got = [free.place(req(1, gpu_memory=m * GiB)) for m in (20, 20, 30)]
    assert all(a is not None for a in got)
    shares = [a.shares[0] for a in got if a is not None]
    assert [(s.node, s.gpu) for s in shares] == [(0, 0)] * 3  # all on GPU 0
    # compute in proportion to memory: 20/80 -> 250, 30/80 -> 375
    assert [s.milli for s in shares] == [250, 250, 375]
    assert [s.memory for s in shares] == [20 * GiB, 20 * GiB, 30 * GiB]
    assert free.free_milli[0] == 125 and free.free_memory[0] == 10 * GiB
    assert free.node_free.tolist() == [1] and free.total_free == 1
    # 30 GiB no longer fits GPU 0: it opens GPU 1
    more = free.place(req(1, gpu_memory=30 * GiB))
    assert more is not None and more.shares[0].gpu == 1
    assert free.total_free == 0
    # 10 GiB fills GPU 0 exactly (tightest fit), compute too
    last = free.place(req(1, gpu_memory=10 * GiB))
    assert last is not None and last.shares[0].gpu == 0 and last.shares[0].milli == 125
    assert free.free_milli[0] == 0 and free.free_memory[0] == 0
    assert free.place(req(1, gpu_memory=60 * GiB)) is None  # GPU 1 has 50 GiB left


def test_proportional_milli_rounds_down_to_at_least_one() -> None:
    # rounded up (not down), shares whose memory fits a GPU could pass its compute
    free = freemap(Cluster.homogeneous(1, 1, GpuType("odd", 3000)))
    alloc = free.place(req(1, gpu_memory=1001))
    assert alloc is not None and alloc.shares[0].milli == 333  # floor(1000 * 1001 / 3000)
    tiny = free.place(req(1, gpu_memory=2))
    assert tiny is not None and tiny.shares[0].milli == 1  # floor(0.67), at least 1


def test_milli_share_prefers_gpus_in_use() -> None:
    free = freemap(Cluster.homogeneous(2, 2))
    first = free.place(req(1, gpu_milli=300))
    second = free.place(req(1, gpu_milli=500))
    assert first is not None and second is not None
    assert (first.shares[0].node, first.shares[0].gpu) == (0, 0)
    assert (second.shares[0].node, second.shares[0].gpu) == (0, 0)
    assert free.free_milli[0] == 200 and free.total_free == 3


def test_whole_gpu_job_never_lands_on_a_shared_gpu() -> None:
    cluster = Cluster.homogeneous(1, 2, "H100")
    free = freemap(cluster)
    share = free.place(req(1, gpu_memory=1 * GiB))
    assert share is not None and share.shares[0].gpu == 0
    assert free.place(req(2)) is None  # only GPU 1 is whole
    whole = free.place(req(1))
    assert whole is not None and [(s.node, s.gpu) for s in whole.shares] == [(0, 1)]
    assert whole.shares[0].memory == 80 * GiB
    assert free.place(req(1)) is None
    # a shared GPU in a running job's allocation is not whole in a new view either
    view = ClusterView(0.0, cluster, running=(JobStatus(req(1, id="s"), share),))
    again = FreeMap(view)
    assert again.node_free.tolist() == [1]
    placed = again.place(req(1))
    assert placed is not None and placed.shares[0].gpu == 1


def test_take_raises_on_over_allocation_and_can_take() -> None:
    free = freemap(Cluster.homogeneous(1, 2))
    alloc = Allocation.whole_gpus([(0, 0)])
    assert free.can_take(alloc)
    free.take(alloc)
    assert not free.can_take(alloc)
    with pytest.raises(PlacementError, match="over-allocated"):
        free.take(alloc)
    doubled = Allocation.whole_gpus([(0, 1), (0, 1)])
    assert not free.can_take(doubled)


def test_view_usage_is_read_only() -> None:
    view = ClusterView(0.0, C3x4, running=busy([1]))
    milli, _ = view.usage()
    assert milli.tolist()[:2] == [1000, 0]
    with pytest.raises(ValueError):
        milli[0] = 0
    free = FreeMap(view)
    free.place(req(4))
    assert view.usage()[0].sum() == 1000  # the FreeMap worked on a copy


# ------------------------------------------------------------------ property test
SMALL_TYPES = (GpuType("small", 16 * GiB), GpuType("big", 80 * GiB))


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    count = draw(st.integers(1, 4))
    nodes = tuple(
        Node(
            f"n{i}",
            draw(st.integers(0, 4)),
            draw(st.sampled_from(SMALL_TYPES)),
            rack=f"rack-{draw(st.integers(0, 1))}",
        )
        for i in range(count)
    )
    return Cluster(nodes)


requests = st.one_of(
    st.builds(
        lambda n, types: req(n, gpu_types=types),
        st.integers(1, 9),
        st.sampled_from([frozenset(), frozenset({"big"}), frozenset({"SMALL"})]),
    ),
    st.builds(lambda gib: req(1, gpu_memory=gib * GiB), st.integers(1, 40)),
    st.builds(lambda m: req(1, gpu_milli=m), st.integers(1, 999)),
)
ops = st.lists(st.one_of(requests, st.integers(0, 20)), max_size=25)


@settings(max_examples=120, deadline=None)
@given(clusters(), st.sampled_from(STRATEGIES), ops)
def test_place_release_never_over_allocates(
    cluster: Cluster, strategy: str, steps: list[JobRequest | int]
) -> None:
    free = FreeMap(ClusterView(0.0, cluster), strategy)
    cap = cluster.arrays.gpu_memory
    initial = (free.free_milli.copy(), free.free_memory.copy(), free.node_free.copy())
    live: list[Allocation] = []

    def check() -> None:
        assert (free.free_milli >= 0).all() and (free.free_memory >= 0).all()
        milli, memory = usage_from_allocations(cluster, live)
        assert np.array_equal(free.free_milli, MILLI_PER_GPU - milli)
        assert np.array_equal(free.free_memory, cap - memory)
        whole = (free.free_milli == MILLI_PER_GPU) & (free.free_memory == cap)
        per_node = [
            int(whole[cluster.gpu_offset(i) : cluster.gpu_offset(i) + n.gpus].sum())
            for i, n in enumerate(cluster.nodes)
        ]
        assert free.node_free.tolist() == per_node
        assert free.total_free == sum(per_node)

    for step in steps:
        if isinstance(step, int):
            if live:
                free.release(live.pop(step % len(live)))
            check()
            continue
        before = free.free_milli.copy(), free.free_memory.copy()
        was_whole = (free.free_milli == MILLI_PER_GPU) & (free.free_memory == cap)
        alloc = free.place(step)
        if alloc is None:  # nothing taken
            assert np.array_equal(free.free_milli, before[0])
            assert np.array_equal(free.free_memory, before[1])
        else:
            gpus = [cluster.gpu_offset(s.node) + s.gpu for s in alloc.shares]
            if step.shares_gpu:
                assert len(alloc.shares) == 1
            else:  # the whole gang, on distinct GPUs that were wholly free
                assert len(alloc.shares) == step.gpus == len(set(gpus))
                assert all(was_whole[g] for g in gpus)
                assert all(s.milli == MILLI_PER_GPU for s in alloc.shares)
            if step.gpu_types:
                wanted = {t.lower() for t in step.gpu_types}
                assert all(cluster.nodes[s.node].gpu_type.name in wanted for s in alloc.shares)
            live.append(alloc)
        check()
    while live:
        free.release(live.pop())
    assert np.array_equal(free.free_milli, initial[0])
    assert np.array_equal(free.free_memory, initial[1])
    assert np.array_equal(free.node_free, initial[2])


@pytest.mark.parametrize("strategy", ["best-fit", "danlu"])
@pytest.mark.parametrize("seed", range(3))
def test_refused_shares_are_refused_as_a_fresh_map_would(strategy: str, seed: int) -> None:
    """A map answers a share that needs no less than one refused since the last release at
    once; after random takes and releases, each answer (and ``any_capacity``) is the one a
    copy without that memory gives."""
    rng = np.random.default_rng(seed)
    big, small = GpuType("big", 80 * GiB), GpuType("small", 16 * GiB)
    nodes = [Node(f"n{i}", 2, big) if i % 2 else Node(f"n{i}", 4, small) for i in range(4)]
    free = FreeMap(ClusterView(0.0, Cluster(nodes)), strategy)
    placed: list[Allocation] = []
    answered_at_once = 0
    for step in range(300):
        if placed and rng.random() < 0.15:
            free.release(placed.pop(int(rng.integers(len(placed)))))
            assert not free._refused_shares
            continue
        kind = rng.random()
        types = frozenset({"big"}) if rng.random() < 0.3 else frozenset()
        if kind < 0.2:
            request = req(int(rng.integers(1, 4)), id=f"w{step}", gpu_types=types)
        elif kind < 0.6:
            request = req(id=f"s{step}", gpu_milli=int(rng.integers(1, 10)) * 100, gpu_types=types)
        else:
            request = req(id=f"m{step}", gpu_memory=int(rng.integers(1, 40)) * GiB, gpu_types=types)
        fresh = free.copy()
        fresh._refused_shares = {}
        refused_before = sum(map(len, free._refused_shares.values()))
        alloc = free.place(request)
        assert alloc == fresh.place(request)
        if alloc is None and sum(map(len, free._refused_shares.values())) == refused_before:
            answered_at_once += 1
        if alloc is not None:
            placed.append(alloc)
        naive = free.free_milli > 0
        assert free.any_capacity() == bool(naive.any())
    assert answered_at_once > 10


@pytest.mark.parametrize("gpus", [1, 2])
def test_a_milli_only_share_fits_where_its_milli_fits_whatever_else_is_idle(gpus: int) -> None:
    """A share naming no memory is sized by its milli: a second one joins the first on its
    GPU (with its part of the memory) whether or not another GPU is idle; it used to wait for
    ever on a 1-GPU node (``any_capacity`` counted only GPUs with memory left) and be packed
    on a 2-GPU one."""
    from danlu.sched.policies.fifo import FifoPolicy

    cluster = Cluster.homogeneous(1, gpus)
    cap = cluster.nodes[0].gpu_type.memory
    first = JobStatus(
        req(id="a", gpu_milli=500), Allocation((GpuShare(0, 0, 500, cap // 2),)), last_start=0.0
    )
    view = ClusterView(10.0, cluster, running=(first,))
    free = FreeMap(view, "best-fit")
    assert free.any_capacity()
    second = JobStatus(req(id="b", gpu_milli=500, seq=1))
    plan = FifoPolicy(backfill=True).schedule(
        ClusterView(10.0, cluster, running=(first,), pending=(second,))
    )
    assert [(s.job_id, s.allocation.shares) for s in plan.starts] == [
        ("b", (GpuShare(0, 0, 500, cap // 2),))
    ]
    # Full by milli: nothing more fits there, and with no other GPU nothing has room.
    free.take(plan.starts[0].allocation)
    assert free.any_capacity() == (gpus > 1)
    assert free.place(req(id="c", gpu_milli=100)) == (
        None if gpus == 1 else Allocation((GpuShare(0, 1, 100, cap // 10),))
    )
