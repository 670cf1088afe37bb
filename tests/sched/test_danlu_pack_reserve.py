"""Tests of danlu's packing scorer: the host-reserve cost of taking one of the few nodes left
that can host a pod of two or more whole GPUs."""

from __future__ import annotations

import numpy as np
import pytest

from danlu.core.errors import ConfigError
from danlu.sched.placement.danlu_pack import RESERVE_WEIGHT, DanluPackScorer
from danlu.sched.placement.danlu_pack_reserve import HostReserve
from danlu.sched.placement.frag import TypicalPods, typical_pods
from danlu.sched.placement.share import (
    MILLI,
    Placement,
    ShareCluster,
    ShareNode,
    ShareRequest,
    make_scorer,
)

GiB = 1024


def wide(gpus: int, weight: float, cpu: int = 0) -> TypicalPods:
    """One wide shape of ``gpus`` whole GPUs, ``weight`` of the GPU demand."""
    return TypicalPods(
        cpu_milli=np.array([cpu], np.int64),
        gpu_milli=np.array([MILLI], np.int64),
        num_gpu=np.array([gpus], np.int64),
        specs=(frozenset(),),
        weight=np.array([weight], np.float64),
        memory_mib=np.array([0], np.int64),
    )


def cluster(count: int = 3) -> ShareCluster:
    return ShareCluster([ShareNode(f"n{i}", 32_000, 256 * GiB, 4, "G") for i in range(count)])


def test_losing_a_host_costs_its_part_of_the_wide_demand_to_come() -> None:
    c = cluster()
    reserve = HostReserve(wide(4, 0.2, cpu=16_000))
    rows = np.array([0, 1, 2])
    # 12,000 milli free: 2,400 of it for the 4-GPU shape, over 3 hosts: 800 each
    full = reserve.costs(c, rows, np.array([1, 0, 0]), 0, 0)
    assert full.tolist() == [800.0, 0.0, 0.0]
    # CPU taken below the shape's 16 cores breaks a host as well; CPU left does not
    assert reserve.costs(c, rows, np.zeros(3, np.int64), 17_000, 0).tolist() == [800.0] * 3
    assert reserve.costs(c, rows, np.zeros(3, np.int64), 16_000, 0).tolist() == [0.0] * 3


def test_the_last_hosts_cost_up_to_a_whole_wide_pod() -> None:
    c = cluster()
    for node in (0, 1):  # a share on each of two nodes: one host left
        c.apply(Placement(node, (0,), ShareRequest(0, num_gpu=1, gpu_milli=500)))
    reserve = HostReserve(wide(4, 0.2))
    # 11,000 milli free: 2,200 to come for the shape, all of it on node 2, capped at 4,000
    assert reserve.costs(c, np.array([2]), np.array([1]), 0, 0).tolist() == [2200.0]
    everything = HostReserve(wide(4, 0.9))
    assert everything.costs(c, np.array([2]), np.array([1]), 0, 0).tolist() == [4000.0]
    # the nodes that are not hosts cost nothing, whatever they take
    assert reserve.costs(c, np.array([0, 1]), np.array([3, 3]), 0, 0).tolist() == [0.0, 0.0]


def test_the_score_is_the_plain_score_less_the_weighted_cost() -> None:
    requests = [ShareRequest(0, 0, 1, 500)] * 8 + [ShareRequest(0, 0, 4, MILLI)]
    typical = typical_pods(requests, coverage=0.8)
    assert typical.large is not None
    c = cluster()
    c.apply(Placement(0, (0,), ShareRequest(0, num_gpu=1, gpu_milli=500)))
    share = ShareRequest(0, 0, 1, 300)
    nodes = np.arange(3)
    rng = np.random.default_rng(0)
    plain = DanluPackScorer(typical, reserve_weight=0).score(c, share, nodes, rng)
    scorer = DanluPackScorer(typical, reserve_weight=0.5)
    with_cost = scorer.score(c, share, nodes, rng)
    best_free = scorer._scores[scorer._key(share)][2][nodes]
    reserve = scorer.reserve
    assert reserve is not None
    cost = reserve.costs(c, nodes, (best_free == MILLI).astype(np.int64), 0, 0)
    assert cost.any()
    assert with_cost.tolist() == pytest.approx((plain - 0.5 * cost).tolist(), abs=1e-6)


@pytest.mark.parametrize(("weight", "node"), [(0.0, 1), (5.0, 0)])
def test_a_share_keeps_off_the_last_host_when_the_cost_outweighs_the_fit(
    weight: float, node: int
) -> None:
    """Node 1 is the last that can host a 4-GPU pod; every GPU of node 0 has 800 free. A
    300 share fits a fresh GPU best (700 left, which a 700 share fills); with the reserve
    weighted high enough it takes 800 on node 0 and keeps the host. (At the default weight
    the cost counts on a cluster of hundreds of nodes, where a host's part of the wide
    demand to come is large: the gpushare lists of ``docs/danlu-packing.md``.)"""
    requests = (
        [ShareRequest(0, 0, 1, 300)] * 9
        + [ShareRequest(0, 0, 1, 700)] * 7
        + [ShareRequest(0, 0, 1, MILLI)] * 2
        + [ShareRequest(0, 0, 4, MILLI)] * 2
    )
    typical = typical_pods(requests, coverage=0.8)
    scorer = DanluPackScorer(typical, reserve_weight=weight)
    c = ShareCluster([ShareNode(f"n{i}", 32_000, 256 * GiB, 4, "G") for i in range(2)], scorer)
    for gpu in range(4):
        c.apply(Placement(0, (gpu,), ShareRequest(0, num_gpu=1, gpu_milli=200)))
    placed = c.place(ShareRequest(0, 0, 1, 300))
    assert placed is not None and (placed.node, placed.gpus) == (node, (0,))


def test_the_weight_is_an_option_checked_like_the_others() -> None:
    typical = typical_pods([ShareRequest(0, 0, 1, 500), ShareRequest(0, 0, 4, MILLI)])
    scorer = make_scorer("danlu", typical=typical, options={"reserve_weight": 0})
    assert isinstance(scorer, DanluPackScorer) and scorer.reserve is None
    default = make_scorer("danlu", typical=typical)
    assert isinstance(default, DanluPackScorer) and default.reserve_weight == RESERVE_WEIGHT
    assert default.reserve is not None
    with pytest.raises(ConfigError, match="reserve_weight must be finite and >= 0"):
        DanluPackScorer(typical, reserve_weight=-1.0)
    no_wide = DanluPackScorer(typical_pods([ShareRequest(0, 0, 1, 500)]))
    assert no_wide.reserve is None
