"""FGD's quantised score must not depend on the float summation order of the drop.

A fragmentation drop that is 0 in exact arithmetic comes out of the BLAS dot product as
a leftover of about 1e-15..1e-12 of either sign, depending on the CPU's kernels; the
quantisation ``floor(100 * sigmoid(drop / 1000))`` used to map +0 to 50 but -4e-15 to 49.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from danlu.sched.placement.frag import FgdScorer, TypicalPods
from danlu.sched.placement.share import Placement, ShareCluster, ShareNode, ShareRequest


def _typical(order: list[int]) -> TypicalPods:
    """Five pod classes with non-dyadic weights, listed in ``order``."""
    cpu = [1000, 2000, 4000, 8000, 0]
    milli = [250, 500, 1000, 1000, 0]
    num = [1, 1, 1, 2, 0]
    weight = [0.3, 0.1, 0.2, 0.3, 0.1]
    return TypicalPods(
        cpu_milli=np.array([cpu[i] for i in order], np.int64),
        gpu_milli=np.array([milli[i] for i in order], np.int64),
        num_gpu=np.array([num[i] for i in order], np.int64),
        specs=tuple(frozenset() for _ in order),
        weight=np.array([weight[i] for i in order], np.float64),
    )


@pytest.mark.parametrize(
    "drop",
    [0.0, 4e-15, -4e-15, 5e-13, -5e-13],
    ids=["zero", "+4e-15", "-4e-15", "+5e-13", "-5e-13"],
)
def test_float_noise_drops_score_as_zero(drop: float) -> None:
    scorer = FgdScorer(_typical([0, 1, 2, 3, 4]))
    assert scorer._to_score(np.array([drop]))[0] == 50.0


def test_a_drop_of_minus_one_micro_gpu_still_scores_below_even() -> None:
    assert FgdScorer(_typical([0, 1, 2, 3, 4]))._to_score(np.array([-1e-3]))[0] == 49.0


@pytest.mark.parametrize(
    "drop", [-1e-3, 1e-3, -400.0, 400.0], ids=["-1e-3", "+1e-3", "-400", "+400"]
)
def test_real_drops_keep_the_artifact_quantisation(drop: float) -> None:
    expected = math.floor(100.0 / (1.0 + math.exp(-drop / 1000.0)))
    scorer = FgdScorer(_typical([0, 1, 2, 3, 4]))
    assert scorer._to_score(np.array([drop]))[0] == expected


def test_unquantised_scores_are_the_raw_drops() -> None:
    drops = np.array([0.0, -4e-15, 5e-13, -1e-3, 123.456789123])
    out = FgdScorer(_typical([0, 1, 2, 3, 4]), quantize=False)._to_score(drops)
    assert out.tobytes() == drops.tobytes()


def _placements(order: list[int]) -> tuple[list[list[float]], list[tuple[int, tuple[int, ...]]]]:
    """Scores and placements of a fixed request sequence with the classes in ``order``."""
    nodes = [ShareNode(f"n{i}", 32_000, 262_144, 4, "T4") for i in range(4)]
    cluster = ShareCluster(nodes, FgdScorer(_typical(order)))
    loads = [(0, 0, 300), (0, 1, 750), (1, 2, 500), (2, 0, 1000), (3, 3, 100)]
    for node, gpu, milli in loads:
        cluster.apply(Placement(node, (gpu,), ShareRequest(0, 0, 1, milli)))
    requests = [ShareRequest(1000, 0, 1, m) for m in (250, 500, 100, 700, 250, 300)]
    requests += [ShareRequest(2000, 0, 1, 1000), ShareRequest(1000, 0, 0, 0)]
    scores: list[list[float]] = []
    placed: list[tuple[int, tuple[int, ...]]] = []
    every = np.arange(len(nodes))
    for req in requests:
        scores.append(cluster.scorer.score(cluster, req, every, cluster.rng).tolist())
        p = cluster.place(req)
        assert p is not None, f"request {req} found no node"
        placed.append((p.node, p.gpus))
    return scores, placed


@pytest.mark.parametrize(
    "order",
    [[4, 3, 2, 1, 0], [2, 0, 4, 1, 3], [1, 3, 0, 4, 2]],
    ids=["reversed", "mixed-a", "mixed-b"],
)
def test_fgd_placements_do_not_depend_on_the_class_order(order: list[int]) -> None:
    assert _placements(order) == _placements([0, 1, 2, 3, 4])
