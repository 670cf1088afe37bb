"""Tests of danlu's packing scorer: GPU-model scarcity, remainder waste, share-GPU cache."""

from __future__ import annotations

import numpy as np

from danlu.sched.placement.danlu_pack import REMAINDER_WEIGHT, SCARCITY_WEIGHT, DanluPackScorer
from danlu.sched.placement.danlu_pack_fill import remainder_waste, scarcity
from danlu.sched.placement.frag import TypicalPods, typical_pods
from danlu.sched.placement.share import Placement, ShareCluster, ShareNode, ShareRequest

T4 = frozenset({"T4"})
G2 = frozenset({"G2"})


def classes(weight: list[float], specs: list[frozenset[str]], gpus: list[int]) -> TypicalPods:
    k = len(weight)
    return TypicalPods(
        cpu_milli=np.full(k, 1000, np.int64),
        gpu_milli=np.array([1000 if g else 0 for g in gpus], np.int64),
        num_gpu=np.array(gpus, np.int64),
        specs=tuple(specs),
        weight=np.array(weight, np.float64),
        memory_mib=np.zeros(k, np.int64),
    )


def test_pressure_is_constrained_demand_over_the_models_capacity() -> None:
    # half the GPU demand may only use T4 (1 GPU of 10): it needs 5x the T4 capacity;
    # a quarter may only use G2 (9 of 10 GPUs); CPU-only and unrestricted classes: 0
    typical = classes([0.25, 0.5, 0.25, 0.5], [frozenset(), T4, G2, T4], [1, 1, 1, 0])
    typical = TypicalPods(
        typical.cpu_milli, typical.gpu_milli, typical.num_gpu, typical.specs,
        np.array([0.25, 0.5, 0.25, 0.0]), typical.memory_mib,
    )  # fmt: skip
    pressure = scarcity(typical, ("G2", "T4"), np.array([9000.0, 1000.0]))
    assert np.allclose(pressure, [0.0, 5.0, 0.25 * 10 / 9, 0.0])
    # a class whose models are all absent, and a multi-model class (its models' sum)
    multi = classes([0.5, 0.5], [frozenset({"A100"}), frozenset({"G2", "T4"})], [1, 2])
    assert np.allclose(scarcity(multi, ("G2", "T4"), np.array([9000.0, 1000.0])), [0.0, 2 / 3])


def two_model_cluster(weight: float) -> ShareCluster:
    # a 1-GPU T4 node (first in the tie order) and an 8-GPU G2 node; 10 % of the pods may
    # only use T4, 15 % only G2, the rest anything
    typical = classes([0.75, 0.1, 0.15], [frozenset(), T4, G2], [1, 1, 1])
    nodes = [ShareNode("t4", 64_000, 262_144, 1, "T4"), ShareNode("g2", 96_000, 786_432, 8, "G2")]
    return ShareCluster(nodes, DanluPackScorer(typical, scarcity_weight=weight))


def test_unrestricted_pods_leave_the_scarce_model_to_the_pods_that_need_it() -> None:
    req = ShareRequest(1000, 0, 1, 1000)
    # by frequency alone the T4 node looks better (fewer classes lose it than the G2 node)
    plain = two_model_cluster(0.0).place(req)
    assert plain is not None and plain.node == 0
    # T4-only demand is 0.1 x 9 GPUs on 1 T4 GPU (pressure 0.9) against G2-only 0.15 x 9
    # on 8 GPUs (0.17): with the scarcity term the unrestricted pod goes to G2
    scarce = two_model_cluster(SCARCITY_WEIGHT).place(req)
    assert scarce is not None and scarce.node == 1
    # a T4-only pod still gets the T4 GPU
    cluster = two_model_cluster(SCARCITY_WEIGHT)
    own = cluster.place(ShareRequest(1000, 0, 1, 1000, T4))
    assert own is not None and own.node == 0


def test_no_restricted_classes_no_change() -> None:
    rng = np.random.default_rng(3)
    nodes = [ShareNode(f"n{i}", 32_000, 131_072, 4, m) for i, m in enumerate(["G2", "T4"] * 3)]
    reqs = [ShareRequest(1000 * int(c), 2048, 1, int(m)) for c, m in zip(
        rng.integers(1, 8, 60), rng.choice([250, 470, 810, 1000], 60), strict=True
    )]  # fmt: skip
    typical = typical_pods(reqs)
    runs = []
    for weight in (0.0, SCARCITY_WEIGHT):
        cluster = ShareCluster(nodes, DanluPackScorer(typical, scarcity_weight=weight))
        runs.append([(p.node, p.gpus) if p else None for p in map(cluster.place, reqs)])
    assert runs[0] == runs[1]


def test_cached_share_gpu_equals_a_fresh_choice() -> None:
    rng = np.random.default_rng(11)
    nodes = [ShareNode(f"n{i}", 64_000, 262_144, 4, "G2") for i in range(6)]
    reqs = [ShareRequest(1000, 1024, 1, int(m)) for m in rng.choice([120, 250, 470, 810], 80)]
    typical = typical_pods(reqs)
    cluster = ShareCluster(nodes, DanluPackScorer(typical))
    checked = 0
    for req in reqs:
        placement = cluster.choose(req)
        if placement is None:
            break
        fresh = DanluPackScorer(typical)  # no cache: scores the GPUs of the node anew
        assert fresh.pick_gpus(cluster, req, placement.node, cluster.rng) == placement.gpus
        cluster.apply(placement)
        checked += 1
    assert checked > 20


def shares(milli: list[int], weight: list[float], specs: list[frozenset[str]]) -> TypicalPods:
    k = len(milli)
    return TypicalPods(
        cpu_milli=np.zeros(k, np.int64),
        gpu_milli=np.array(milli, np.int64),
        num_gpu=np.ones(k, np.int64),
        specs=tuple(specs),
        weight=np.array(weight, np.float64),
    )


def test_remainder_waste_follows_the_stream_of_pods_that_fit() -> None:
    # 470-pods only: 1000 -> 530 -> 60, nothing fits 60
    only = remainder_waste(shares([470], [1.0], [frozenset()]), ("G2",))[0]
    assert only[1000] == 60.0 and only[530] == 60.0 and only[469] == 469.0 and only[0] == 0.0
    # half whole-GPU pods (take a free GPU, leave 0), half 470: 1000 -> 0.5 * 0 + 0.5 * 60;
    # a T4-only 100-pod class counts on T4, not on G2
    typical = shares([1000, 470, 100], [0.4, 0.4, 0.2], [frozenset(), frozenset(), T4])
    waste = remainder_waste(typical, ("G2", "T4"))
    assert waste[0, 1000] == 30.0 and waste[0, 60] == 60.0
    assert waste[1, 60] == 60.0 and waste[1, 100] == 0.0 and waste[1, 250] == 50.0
    assert (waste <= np.arange(1001)).all() and (waste >= 0).all()


def test_remainder_term_adds_the_drop_of_the_gpus_expected_waste() -> None:
    typical = shares([470, 320, 160], [0.4, 0.4, 0.2], [frozenset()] * 3)
    nodes = [ShareNode(f"n{i}", 64_000, 262_144, 1, "G2") for i in range(3)]
    req = ShareRequest(0, 0, 1, 320)
    waste = remainder_waste(typical, ("G2",))[0]
    scores = []
    for weight in (0.0, REMAINDER_WEIGHT):
        cluster = ShareCluster(nodes, DanluPackScorer(typical, remainder_weight=weight))
        cluster.apply(Placement(1, (0,), ShareRequest(0, 0, 1, 470)))  # 530 free
        cluster.apply(Placement(2, (0,), ShareRequest(0, 0, 1, 320)))  # 680 free
        scores.append(cluster.scorer.score(cluster, req, np.arange(3), cluster.rng))
    # one GPU per node: 1000 free on n0, 530 on n1, 680 on n2
    gain = REMAINDER_WEIGHT * (waste[[1000, 530, 680]] - waste[[680, 210, 360]])
    assert np.allclose(scores[1] - scores[0], gain, atol=1e-5)
    assert not np.allclose(gain, gain[0])  # the term tells the GPUs apart
