"""Tests of GPU-sharing placement: state, scorers, fragmentation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from danlu.core.errors import PlacementError, SpecError, UnknownNameError
from danlu.sched.placement.frag import (
    FgdScorer,
    TypicalPods,
    cluster_fragmentation,
    node_fragmentation,
    typical_pods,
    typical_pods_counted,
)
from danlu.sched.placement.share import (
    BestFitScorer,
    FloatArray,
    IntArray,
    Placement,
    ShareCluster,
    ShareNode,
    ShareRequest,
    ShareScorer,
    default_scorers,
    make_scorer,
    scorer_names,
)

BIG_CPU = 64_000
BIG_MEM = 262_144


def node(
    name: str, gpus: int, model: str = "T4", cpu: int = BIG_CPU, mem: int = BIG_MEM
) -> ShareNode:
    return ShareNode(name, cpu, mem, gpus, model if gpus else "")


def share(
    milli: int, cpu: int = 1000, mem: int = 1024, spec: frozenset[str] = frozenset()
) -> ShareRequest:
    return ShareRequest(cpu, mem, 1, milli, spec)


def whole(n: int, cpu: int = 1000, mem: int = 1024) -> ShareRequest:
    return ShareRequest(cpu, mem, n, 1000)


def one_class(milli: int, num: int = 1, cpu: int = 0) -> TypicalPods:
    return TypicalPods(
        cpu_milli=np.array([cpu]),
        gpu_milli=np.array([milli]),
        num_gpu=np.array([num]),
        specs=(frozenset(),),
        weight=np.array([1.0]),
    )


def take(cluster: ShareCluster, node_idx: int, gpu: int, milli: int) -> None:
    """Pre-load a node by hand with a share of ``milli`` on GPU ``gpu``."""
    cluster.apply(Placement(node_idx, (gpu,), ShareRequest(0, 0, 1, milli)))


# ----------------------------------------------------------------- requests
def test_request_validation() -> None:
    with pytest.raises(SpecError):
        ShareRequest(1000, 0, 2, 500)  # several GPUs must be whole
    with pytest.raises(SpecError):
        ShareRequest(1000, 0, 0, 300)  # milli without GPUs
    with pytest.raises(SpecError):
        ShareRequest(1000, 0, 1, 0)
    with pytest.raises(SpecError):
        ShareRequest(-1, 0, 0, 0)
    assert share(300).shared and not whole(1).shared
    assert whole(4).total_gpu_milli == 4000


# ----------------------------------------------------------------- best-fit
def test_best_fit_prefers_the_tightest_node() -> None:
    cluster = ShareCluster([node("a", 8), node("b", 2), node("c", 4)], "best-fit")
    p = cluster.place(whole(1))
    assert p is not None and p.node == 1 and p.gpus == (0,)


def test_best_fit_counts_cpu_too() -> None:
    # same GPUs, node b has less CPU left after the pod: b is the better fit
    cluster = ShareCluster([node("a", 2, cpu=64_000), node("b", 2, cpu=16_000)], "best-fit")
    p = cluster.place(whole(1, cpu=8000))
    assert p is not None and p.node == 1


def test_best_fit_share_takes_tightest_gpu() -> None:
    cluster = ShareCluster([node("a", 4)], "best-fit")
    take(cluster, 0, 1, 500)  # GPU1: 500 free
    take(cluster, 0, 2, 300)  # GPU2: 700 free
    p = cluster.place(share(400))
    assert p is not None and p.gpus == (1,)
    assert cluster.gpu_free[0].tolist() == [1000, 100, 700, 1000]


def test_whole_gpus_only_take_fully_free_gpus() -> None:
    cluster = ShareCluster([node("a", 2), node("b", 3)], "best-fit")
    take(cluster, 0, 0, 100)
    take(cluster, 1, 0, 100)
    p = cluster.place(whole(2))
    assert p is not None and p.node == 1 and p.gpus == (1, 2)
    assert cluster.place(whole(2)) is None


def test_ties_go_to_lowest_rank() -> None:
    nodes = [node(f"n{i}", 2) for i in range(4)]
    cluster = ShareCluster(nodes, "best-fit", tie_rank=[3, 1, 0, 2])
    p = cluster.place(whole(1))
    assert p is not None and p.node == 2


# ----------------------------------------------------------------- limits
def test_cpu_memory_and_gpu_model_limits() -> None:
    nodes = [node("t4", 2, "T4", cpu=8000, mem=16_384), node("v100", 2, "V100M32", cpu=32_000)]
    cluster = ShareCluster(nodes, "best-fit")
    assert cluster.place(whole(1, cpu=64_001)) is None  # no node has the CPU
    p = cluster.place(whole(1, cpu=16_000))  # only v100 has the CPU
    assert p is not None and p.node == 1
    p = cluster.place(ShareRequest(1000, 32_768, 0, 0))  # memory: only v100
    assert p is not None and p.node == 1 and p.gpus == ()
    p = cluster.place(share(500, spec=frozenset({"T4"})))
    assert p is not None and p.node == 0
    assert cluster.place(share(500, spec=frozenset({"A100"}))) is None


def test_gpu_request_never_lands_on_cpu_node() -> None:
    cluster = ShareCluster([ShareNode("cpu", 128_000, BIG_MEM), node("g", 1)], "best-fit")
    p = cluster.place(share(100, cpu=1000))
    assert p is not None and p.node == 1
    p = cluster.place(ShareRequest(1000, 0, 0, 0))  # a CPU pod may use either
    assert p is not None


def test_release_restores_and_rejects_double_release() -> None:
    cluster = ShareCluster([node("a", 2)], "best-fit")
    p = cluster.place(share(250))
    assert p is not None
    cluster.release(p)
    assert cluster.gpu_free[0].tolist() == [1000, 1000]
    assert cluster.cpu_free[0] == BIG_CPU
    with pytest.raises(PlacementError):
        cluster.release(p)
    with pytest.raises(PlacementError):
        cluster.apply(Placement(0, (5,), share(100)))


# ----------------------------------------------------------------- fragmentation
def test_fragmentation_by_hand() -> None:
    typical = TypicalPods(
        cpu_milli=np.array([1000, 1000, 2000]),
        gpu_milli=np.array([500, 1000, 0]),
        num_gpu=np.array([1, 2, 0]),
        specs=(frozenset(), frozenset(), frozenset()),
        weight=np.array([0.5, 0.25, 0.25]),
    )
    cpu = np.array([10_000, 500, 10_000])
    gpu = np.array([[300, 1000], [300, 1000], [0, 0]])
    frag = node_fragmentation(cpu, gpu, ["T4", "T4", "T4"], typical)
    # node 0: class 0 fits -> only the 300 counts; class 1 lacks GPUs, class 2 is CPU-only
    assert frag[0] == pytest.approx(0.5 * 300 + 0.25 * 1300 + 0.25 * 1300)
    # node 1 lacks CPU for every GPU class: everything free is fragment
    assert frag[1] == pytest.approx(1300)
    assert frag[2] == 0


def test_fragmentation_respects_gpu_model() -> None:
    typical = TypicalPods(
        cpu_milli=np.array([0]),
        gpu_milli=np.array([500]),
        num_gpu=np.array([1]),
        specs=(frozenset({"A10"}),),
        weight=np.array([1.0]),
    )
    frag = node_fragmentation(
        np.array([1000, 1000]), np.array([[1000], [1000]]), ["A10", "T4"], typical
    )
    assert frag.tolist() == [0.0, 1000.0]


def test_typical_pods_cover_and_normalise() -> None:
    reqs = [share(500)] * 6 + [whole(1)] * 3 + [ShareRequest(2000, 0, 0, 0)]
    t = typical_pods(reqs, coverage=0.85)
    assert len(t) == 2
    assert t.gpu_milli.tolist() == [500, 1000]
    assert t.weight.tolist() == pytest.approx([6 / 9, 3 / 9])
    assert len(typical_pods(reqs, coverage=1.0)) == 3


def test_typical_pods_of_counted_requests_equal_those_of_the_listed_ones() -> None:
    """``(request, n)`` stands for ``n`` copies: the classes, weights, memory medians and
    large shapes are those of the list with the copies written out."""
    a, b = ShareRequest(0, 3000, 1, 500), ShareRequest(0, 9000, 1, 500)
    c, d = ShareRequest(8000, 1000, 4, 1000), ShareRequest(0, 0, 1, 250, frozenset({"T4"}))
    counted = [(a, 5), (b, 2), (c, 2), (d, 3), (whole(1), 0)]
    listed = [r for r, n in counted for _ in range(n)]
    for coverage in (0.5, 0.95, 1.0):
        x, y = typical_pods_counted(counted, coverage), typical_pods(listed, coverage)
        assert (x.cpu_milli.tolist(), x.gpu_milli.tolist(), x.num_gpu.tolist(), x.specs) == (
            y.cpu_milli.tolist(),
            y.gpu_milli.tolist(),
            y.num_gpu.tolist(),
            y.specs,
        )
        assert x.weight.tolist() == y.weight.tolist()
        assert x.memory.tolist() == y.memory.tolist()
        assert x.large is not None and y.large is not None
        assert x.large.weight.tolist() == y.large.weight.tolist()
    assert (
        typical_pods_counted(counted, 1.0).memory.tolist()[0] == 3000
    )  # median of 5 x 3000, 2 x 9000


def test_fgd_avoids_creating_a_fragment_where_best_fit_does_not() -> None:
    typical = one_class(500)
    nodes = [node("x", 1), node("y", 1)]
    fgd = ShareCluster(nodes, FgdScorer(typical, quantize=False))
    bf = ShareCluster(nodes, "best-fit")
    for c in (fgd, bf):
        take(c, 0, 0, 400)  # x: 600 free, fits a typical pod; y: 1000 free
    # 300 on x leaves 300 (< 500: a fragment); 300 on y leaves 700 (still fits)
    scores = fgd.scorer.score(fgd, share(300), np.array([0, 1]), fgd.rng)
    assert scores.tolist() == [-300.0, 0.0]
    p_fgd, p_bf = fgd.place(share(300)), bf.place(share(300))
    assert p_fgd is not None and p_fgd.node == 1
    assert p_bf is not None and p_bf.node == 0


def test_fgd_fills_an_existing_fragment_and_picks_the_gpu() -> None:
    typical = one_class(600)
    cluster = ShareCluster([node("a", 2), node("b", 1)], "fgd", typical=typical)
    take(cluster, 0, 1, 600)  # a: GPUs [1000, 400]; 400 is a fragment for 600-pods
    p = cluster.place(share(400))
    assert p is not None and (p.node, p.gpus) == (0, (1,))
    # quantised like the artifact: floor(100 * sigmoid(drop / 1000)), drop = 400
    s = cluster.scorer.score(cluster, share(100), np.array([0, 1]), cluster.rng)
    assert s.tolist() == [50.0, 50.0]
    assert FgdScorer(typical)._to_score(np.array([400.0]))[0] == 59.0


def test_fgd_scores_follow_state_changes() -> None:
    typical = one_class(500)
    cluster = ShareCluster([node("a", 1), node("b", 1)], FgdScorer(typical, quantize=False))
    req = share(300)
    before = cluster.scorer.score(cluster, req, np.array([0, 1]), cluster.rng)
    take(cluster, 0, 0, 400)  # invalidates node a's cached score
    after = cluster.scorer.score(cluster, req, np.array([0, 1]), cluster.rng)
    assert before.tolist() == [0.0, 0.0] and after.tolist() == [-300.0, 0.0]


def test_cluster_fragmentation_totals() -> None:
    cluster = ShareCluster([node("a", 2), node("b", 1)], "best-fit")
    take(cluster, 0, 0, 700)
    frag, idle = cluster_fragmentation(cluster, one_class(500))
    assert (frag, idle) == (300.0, 2300.0)


# ----------------------------------------------------------------- registry
def test_registry() -> None:
    assert {"random", "best-fit", "fgd"} <= set(scorer_names())
    with pytest.raises(UnknownNameError):
        make_scorer("no-such-policy")
    assert isinstance(make_scorer("best-fit"), BestFitScorer)

    class Last(ShareScorer):
        name = "last-node"

        def score(
            self,
            cluster: ShareCluster,
            request: ShareRequest,
            nodes: IntArray,
            rng: np.random.Generator,
        ) -> FloatArray:
            return nodes.astype(np.float64)

    registry = default_scorers()
    registry.register("last-node", lambda _t: Last())
    scorer = registry.create("last-node")
    cluster = ShareCluster([node("a", 1), node("b", 1), node("c", 1)], scorer)
    p = cluster.place(share(100))
    assert p is not None and p.node == 2


def test_random_is_deterministic_for_a_seed() -> None:
    nodes = [node(f"n{i}", 4) for i in range(20)]

    def run(seed: int) -> list[tuple[int, tuple[int, ...]]]:
        c = ShareCluster(nodes, "random", rng=np.random.default_rng(seed))
        out = []
        for _ in range(30):
            p = c.place(share(300))
            assert p is not None
            out.append((p.node, p.gpus))
        return out

    assert run(1) == run(1)
    assert run(1) != run(2)


# ----------------------------------------------------------------- properties
MODELS = ("T4", "A10")
node_st = st.builds(
    lambda i, g, m, cpu, mem: ShareNode(f"n{i}", cpu, mem, g, MODELS[m] if g else ""),
    st.integers(0, 10_000),
    st.sampled_from([0, 1, 2, 4, 8]),
    st.integers(0, 1),
    st.integers(1000, 16_000),
    st.integers(1024, 16_384),
)
request_st = st.one_of(
    st.builds(
        lambda cpu, mem, milli, spec: ShareRequest(cpu, mem, 1, milli, spec),
        st.integers(0, 8000),
        st.integers(0, 8192),
        st.integers(1, 999),
        st.sampled_from([frozenset(), frozenset({"T4"}), frozenset({"A10", "V100M32"})]),
    ),
    st.builds(
        lambda cpu, mem, n: ShareRequest(cpu, mem, n, 1000),
        st.integers(0, 8000),
        st.integers(0, 8192),
        st.sampled_from([1, 2, 4, 8]),
    ),
    st.builds(
        lambda cpu, mem: ShareRequest(cpu, mem, 0, 0), st.integers(0, 8000), st.integers(0, 8192)
    ),
)
ops_st = st.lists(st.tuples(st.booleans(), request_st, st.integers(0, 1000)), max_size=60)


def check_invariants(c: ShareCluster) -> None:
    assert (c.gpu_free >= 0).all() and (c.gpu_free <= 1000).all()
    assert (c.gpu_free[~c.gpu_exists] == 0).all()
    assert ((c.cpu_free >= 0) & (c.cpu_free <= c.cpu_cap)).all()
    assert ((c.mem_free >= 0) & (c.mem_free <= c.mem_cap)).all()
    assert (c.gpu_free_total == c.gpu_free.sum(axis=1)).all()
    assert (c.n_full == (c.gpu_free == 1000).sum(axis=1)).all()
    assert (c.max_free == c.gpu_free.max(axis=1)).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(node_st, min_size=1, max_size=6),
    ops=ops_st,
    policy=st.sampled_from(["random", "best-fit", "fgd"]),
)
def test_place_release_invariants(
    nodes: list[ShareNode], ops: list[tuple[bool, ShareRequest, int]], policy: str
) -> None:
    typical = typical_pods([r for _, r, _ in ops] or [share(500)])
    c = ShareCluster(nodes, policy, rng=np.random.default_rng(0), typical=typical)
    initial = (c.cpu_free.copy(), c.mem_free.copy(), c.gpu_free.copy())
    live: list[Placement] = []
    for is_release, req, pick in ops:
        if is_release and live:
            c.release(live.pop(pick % len(live)))
        else:
            feasible = c.feasible(req)
            p = c.place(req)
            assert (p is None) == (not feasible.any())
            if p is not None:
                assert feasible[p.node]
                live.append(p)
        check_invariants(c)
    for p in reversed(live):
        c.release(p)
    check_invariants(c)
    assert (c.cpu_free == initial[0]).all()
    assert (c.mem_free == initial[1]).all()
    assert (c.gpu_free == initial[2]).all()
