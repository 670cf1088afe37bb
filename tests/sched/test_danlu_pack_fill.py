"""Tests of danlu's packing scorer: the fill fragmentation and the combined score.

Exact-score tests switch the remainder term off (``remainder_weight=0``); it is tested in
``test_danlu_pack_scarcity.py``."""

from __future__ import annotations

import numpy as np
import pytest

from danlu.sched.placement.danlu_pack import FGD_WEIGHT, DanluPackScorer
from danlu.sched.placement.danlu_pack_fill import FillFragmentation, fill_fragmentation
from danlu.sched.placement.frag import FgdScorer, TypicalPods, typical_pods
from danlu.sched.placement.share import (
    Placement,
    ShareCluster,
    ShareNode,
    ShareRequest,
    make_scorer,
)


def classes(
    gpu_milli: list[int],
    num_gpu: list[int],
    cpu: list[int],
    mem: list[int] | None = None,
    weight: list[float] | None = None,
    specs: tuple[frozenset[str], ...] | None = None,
) -> TypicalPods:
    k = len(gpu_milli)
    return TypicalPods(
        cpu_milli=np.array(cpu, np.int64),
        gpu_milli=np.array(gpu_milli, np.int64),
        num_gpu=np.array(num_gpu, np.int64),
        specs=specs if specs is not None else (frozenset(),) * k,
        weight=np.array(weight if weight is not None else [1.0 / k] * k),
        memory_mib=None if mem is None else np.array(mem, np.int64),
    )


def take(cluster: ShareCluster, node_idx: int, gpu: int, milli: int) -> None:
    cluster.apply(Placement(node_idx, (gpu,), ShareRequest(0, 0, 1, milli)))


# ----------------------------------------------------------------- the measure
def test_share_remainders_no_whole_number_of_pods_fills_count() -> None:
    typical = classes([470], [1], [1000])
    gpu = np.array([[1000, 530], [300, 0]])
    frag = fill_fragmentation(
        np.array([64_000, 64_000]), np.array([10**6, 10**6]), gpu, ["T4", "T4"], typical
    )
    # node 0: 1000 -> two pods, 60 left; 530 -> one pod, 60 left. node 1: 300 fits none
    assert frag.tolist() == [120.0, 300.0]


def test_cpu_memory_and_model_cap_the_pods() -> None:
    typical = classes([1000], [1], [12_000], mem=[50_000])
    gpu = np.array([[1000] * 8] * 3)
    cpu = np.array([96_000, 40_000, 96_000])  # node 1: CPU for 3 pods of 8
    mem = np.array([10**6, 10**6, 120_000])  # node 2: memory for 2 pods
    frag = fill_fragmentation(cpu, mem, gpu, ["G2", "G2", "G2"], typical)
    assert frag.tolist() == [0.0, 5000.0, 6000.0]
    only_a10 = classes([1000], [1], [0], specs=(frozenset({"A10"}),))
    frag = fill_fragmentation(cpu, mem, gpu, ["A10", "G2", "A10"], only_a10)
    assert frag.tolist() == [0.0, 8000.0, 0.0]


def test_multi_gpu_classes_and_cpu_only_classes() -> None:
    # 4-GPU pods on 6 fully free GPUs fill 4; a CPU-only class fills no GPU at all
    typical = classes([1000, 0], [4, 0], [0, 1000], weight=[0.5, 0.5])
    gpu = np.array([[1000] * 6 + [400, 0]])
    frag = fill_fragmentation(np.array([10**6]), np.array([10**6]), gpu, ["G2"], typical)
    assert frag.tolist() == [pytest.approx(0.5 * 2400 + 0.5 * 6400)]


def test_typical_pods_record_the_median_memory() -> None:
    reqs = [ShareRequest(1000, m, 1, 500) for m in (100, 300, 200)] + [ShareRequest(2000, 7, 0, 0)]
    t = typical_pods(reqs, coverage=1.0)
    assert t.memory_mib is not None
    assert dict(zip(t.gpu_milli.tolist(), t.memory_mib.tolist(), strict=True)) == {
        500: 200,
        0: 7,
    }


# ----------------------------------------------------------------- the scorer
def two_gpu_cluster(scorer: object) -> ShareCluster:
    nodes = [ShareNode("a", 64_000, 262_144, 1, "T4"), ShareNode("b", 64_000, 262_144, 1, "T4")]
    cluster = ShareCluster(nodes, scorer)  # type: ignore[arg-type]
    take(cluster, 1, 0, 300)  # b: 700 free
    return cluster


def test_fill_breaks_a_tie_fgd_cannot_see() -> None:
    # class 400: 300 on a (1000 -> 700) or on b (700 -> 400). FGD: both still fit a pod;
    # fill: on b the 400 left is filled exactly, on a 300 of 700 stay unfillable.
    typical = classes([400], [1], [0])
    req = ShareRequest(1000, 1024, 1, 300)
    fgd = two_gpu_cluster(FgdScorer(typical, quantize=False))
    assert fgd.scorer.score(fgd, req, np.array([0, 1]), fgd.rng).tolist() == [0.0, 0.0]
    fgd_choice = fgd.place(req)
    assert fgd_choice is not None and fgd_choice.node == 0  # tie: lowest rank
    danlu = two_gpu_cluster(DanluPackScorer(typical, remainder_weight=0.0))
    scores = danlu.scorer.score(danlu, req, np.array([0, 1]), danlu.rng)
    assert scores.tolist() == [-100.0, 300.0]
    p = danlu.place(req)
    assert p is not None and (p.node, p.gpus) == (1, (0,))


def test_cpu_only_pod_goes_where_it_strands_no_gpu() -> None:
    # 8 GPUs and 96 cores vs 2 GPUs and 104 cores; typical pods: one GPU with 12 cores.
    # A 20-core CPU-only pod still leaves room for ONE GPU pod on either node (FGD ties)
    # but only node t keeps CPU for all of its GPUs.
    typical = classes([1000], [1], [12_000], weight=[1.0])
    nodes = [ShareNode("g", 96_000, 10**6, 8, "G2"), ShareNode("t", 104_000, 10**6, 2, "T4")]
    req = ShareRequest(20_000, 1024)
    fgd = ShareCluster(nodes, FgdScorer(typical, quantize=False))
    assert fgd.scorer.score(fgd, req, np.array([0, 1]), fgd.rng).tolist() == [0.0, 0.0]
    cluster = ShareCluster(nodes, DanluPackScorer(typical))
    p = cluster.place(req)
    assert p is not None and p.node == 1
    assert cluster.scorer.score(cluster, req, np.array([0]), cluster.rng)[0] < 0


def test_fgd_measure_dominates_the_combination() -> None:
    typical = classes([500], [1], [0])
    scorer = DanluPackScorer(typical, remainder_weight=0.0)
    cluster = two_gpu_cluster(scorer)
    req = ShareRequest(0, 0, 1, 300)
    # a: 1000 -> 700 still fits a 500-pod (FGD 0) but one pod fewer (fill 0 -> 200 left);
    # b: 700 -> 400 fits none (FGD -400; fill 200 -> 400 left)
    expected = [-200.0, FGD_WEIGHT * -400.0 - 200.0]
    assert scorer.score(cluster, req, np.array([0, 1]), cluster.rng).tolist() == expected


def test_scores_follow_state_changes_and_pick_the_tightest_gpu() -> None:
    typical = classes([600], [1], [0])
    nodes = [ShareNode("a", 64_000, 262_144, 4, "T4")]
    cluster = ShareCluster(nodes, DanluPackScorer(typical, remainder_weight=0.0))
    req = ShareRequest(0, 0, 1, 400)
    before = cluster.scorer.score(cluster, req, np.array([0]), cluster.rng)
    assert before.tolist() == [400.0]  # 1000 -> 600: FGD 0, fill 400 -> 0 left over
    take(cluster, 0, 2, 600)  # GPU 2 now has 400 free, a fragment for 600-pods
    after = cluster.scorer.score(cluster, req, np.array([0]), cluster.rng)
    assert after.tolist() == [FGD_WEIGHT * 400.0 + 400.0]
    assert cluster.scorer.pick_gpus(cluster, req, 0, cluster.rng) == (2,)


def test_registered_as_danlu_and_needs_typical_pods() -> None:
    typical = classes([500], [1], [0])
    scorer = make_scorer("danlu", typical=typical)
    assert isinstance(scorer, DanluPackScorer) and scorer.name == "danlu"
    assert isinstance(scorer.fill, FillFragmentation)


def test_deterministic_and_never_places_where_it_does_not_fit() -> None:
    rng = np.random.default_rng(7)
    nodes = [
        ShareNode(f"n{i}", int(rng.integers(8, 97)) * 1000, 200_000, g, m)
        for i, (g, m) in enumerate([(8, "G2"), (2, "T4"), (4, "V100M16"), (1, "A10")] * 4)
    ]
    reqs = [
        ShareRequest(int(rng.integers(0, 16)) * 1000, 4096, 1, int(m))
        for m in rng.choice([230, 470, 650, 810, 1000], size=120)
    ] + [ShareRequest(8000, 4096, 2, 1000), ShareRequest(12_000, 4096)] * 10
    typical = typical_pods(reqs)
    runs = []
    for _ in range(2):
        cluster = ShareCluster(nodes, "danlu", typical=typical, tie_rank=np.arange(16)[::-1])
        placed = [cluster.place(r) for r in reqs]
        assert (cluster.gpu_free >= 0).all() and (cluster.cpu_free >= 0).all()
        assert (cluster.mem_free >= 0).all()
        runs.append([(p.node, p.gpus) if p else None for p in placed])
    assert runs[0] == runs[1]
    assert any(p is None for p in runs[0])  # the cluster was filled up
