"""Tests of danlu's packing scorer: nodes kept for the rare pods of two or more whole GPUs."""

from __future__ import annotations

import numpy as np
import pytest

from danlu.core.errors import ConfigError
from danlu.sched.placement.danlu_pack import LARGE_WEIGHT, RESERVE_WEIGHT, DanluPackScorer
from danlu.sched.placement.danlu_pack_fill import host_pressure, with_large
from danlu.sched.placement.frag import TypicalPods, typical_pods
from danlu.sched.placement.share import ShareCluster, ShareNode, ShareRequest, make_scorer

GiB = 1024


def shapes(
    cpu: list[int], gpus: list[int], weight: list[float], mem: list[int] | None = None
) -> TypicalPods:
    k = len(cpu)
    return TypicalPods(
        cpu_milli=np.array(cpu, np.int64),
        gpu_milli=np.full(k, 1000, np.int64),
        num_gpu=np.array(gpus, np.int64),
        specs=(frozenset(),) * k,
        weight=np.array(weight, np.float64),
        memory_mib=np.array(mem if mem is not None else [0] * k, np.int64),
    )


def test_typical_pods_list_every_large_shape_by_its_share_of_the_gpu_demand() -> None:
    requests = (
        [ShareRequest(8_000, 16 * GiB, 1, 1000)] * 16
        + [ShareRequest(64_000, 256 * GiB, 8, 1000)]  # rare by count: not typical
        + [ShareRequest(16_000, 60 * GiB, 2, 1000), ShareRequest(16_000, 64 * GiB, 2, 1000)]
        + [ShareRequest(4_000, 8 * GiB, 1, 500)] * 2
    )
    typical = typical_pods(requests, coverage=0.75)
    assert typical.num_gpu.tolist() == [1]  # 16 of 21 pods cover the 75 %
    large = typical.large
    assert large is not None
    demand = 16 * 1000 + 8000 + 2 * 2000 + 2 * 500
    # most frequent first (the two 2-GPU requests are one shape, with the median memory)
    assert large.num_gpu.tolist() == [2, 8]
    assert large.cpu_milli.tolist() == [16_000, 64_000]
    assert np.allclose(large.weight, [4000 / demand, 8000 / demand])
    assert large.memory_mib is not None and large.memory_mib.tolist() == [62 * GiB, 256 * GiB]
    # no shape of two or more whole GPUs: no large classes
    assert typical_pods(requests[:16] + requests[-2:]).large is None


def test_with_large_adds_the_missing_shapes_at_frequency_zero() -> None:
    typical = shapes([8_000, 64_000], [1, 8], [0.9, 0.1])
    typical = TypicalPods(
        typical.cpu_milli, typical.gpu_milli, typical.num_gpu, typical.specs,
        typical.weight, typical.memory_mib, shapes([64_000, 32_000], [8, 4], [0.5, 0.2]),
    )  # fmt: skip
    classes, share = with_large(typical)
    assert classes.num_gpu.tolist() == [1, 8, 4]
    assert classes.cpu_milli.tolist() == [8_000, 64_000, 32_000]
    assert classes.weight.tolist() == [0.9, 0.1, 0.0]
    assert share.tolist() == [0.0, 0.5, 0.2]
    plain, none = with_large(shapes([8_000], [1], [1.0]))
    assert len(plain) == 1 and none.tolist() == [0.0]


def test_host_pressure_is_the_demand_over_the_capacity_that_could_host_it() -> None:
    nodes = [ShareNode("big", 128_000, 768 * GiB, 8, "G")] + [
        ShareNode(f"n{i}", 96_000, 384 * GiB, 8, "G") for i in range(3)
    ]
    cluster = ShareCluster(nodes)
    classes = shapes(
        [120_000, 64_000, 16_000, 16_000], [8, 8, 2, 2], [0.0] * 4, [720 * GiB, 0, 0, 800 * GiB]
    )
    share = np.array([0.1, 0.1, 0.0, 0.2])
    # only the 128-core node hosts the first class (8 of 32 GPUs); every node the second;
    # the third has no share of the demand; no node has the fourth's memory
    assert np.allclose(host_pressure(classes, share, cluster), [0.4, 0.1, 0.0, 0.0])


def big_and_small(large_weight: float, reserve_weight: float = 0.0) -> ShareCluster:
    # the 128-core node comes first in the tie order; one-GPU pods of 12 cores fit all
    # GPUs of either node, so FGD's measure and the fill measure see no difference
    typical = shapes([12_000], [1], [1.0])
    typical = TypicalPods(
        typical.cpu_milli, typical.gpu_milli, typical.num_gpu, typical.specs,
        typical.weight, typical.memory_mib, shapes([120_000], [8], [0.3]),
    )  # fmt: skip
    nodes = [
        ShareNode("big", 128_000, 768 * GiB, 8, "G"),
        ShareNode("n", 96_000, 384 * GiB, 8, "G"),
    ]
    scorer = DanluPackScorer(typical, large_weight=large_weight, reserve_weight=reserve_weight)
    return ShareCluster(nodes, scorer)


def test_small_pods_keep_off_the_only_node_a_large_pod_fits() -> None:
    small = ShareRequest(12_000, 16 * GiB, 1, 1000)
    large = ShareRequest(120_000, 720 * GiB, 8, 1000)
    plain = big_and_small(0.0)
    first = plain.place(small)
    assert first is not None and first.node == 0  # a tie: the first node in the order
    assert plain.place(large) is None  # the 8-GPU pod no longer fits anywhere
    kept = big_and_small(LARGE_WEIGHT)
    first = kept.place(small)
    assert first is not None and first.node == 1
    placed = kept.place(large)
    assert placed is not None and placed.node == 0 and len(placed.gpus) == 8
    # the host-reserve cost alone keeps it off as well (the only host: a whole pod's worth)
    reserved = big_and_small(0.0, RESERVE_WEIGHT)
    first = reserved.place(small)
    assert first is not None and first.node == 1


def test_scorer_options_set_the_weights() -> None:
    typical = shapes([12_000], [1], [1.0])
    scorer = make_scorer("danlu", typical=typical, options={"large_weight": 0, "fgd_weight": 3})
    assert isinstance(scorer, DanluPackScorer)
    assert (scorer.large_weight, scorer.fgd_weight) == (0.0, 3.0)
    default = make_scorer("danlu", typical=typical, options={})
    assert isinstance(default, DanluPackScorer) and default.large_weight == LARGE_WEIGHT
    # the scorer checks its weights however it is built
    with pytest.raises(ConfigError, match="large_weight must be finite and >= 0"):
        DanluPackScorer(typical, large_weight=-1.0)
