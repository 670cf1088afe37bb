"""danlu's packing scorer for fractional and memory-sized GPU requests.

FGD (ATC'23) scores a node by how much the placement grows the node's expected
fragmentation against the typical request shapes, quantised into 100 buckets
(``floor(100 * sigmoid(drop / 1000))``); nodes in the same bucket tie and a random node
rank decides. danlu keeps FGD's fragmentation measure and its buckets, and breaks the ties
by packing instead of at random: among the nodes of the best bucket it prefers the node
that is left with the least free GPU capacity, then the least free CPU (both as a fraction
of the node's capacity), so partly used nodes fill up before empty ones are opened and the
whole GPUs that gang and whole-GPU requests need stay free. The tie-break adds less than one
bucket, so it never overrides a fragmentation difference FGD sees.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from danlu.sched.placement.frag import FgdScorer, TypicalPods
from danlu.sched.placement.share import FloatArray, IntArray, ShareCluster, ShareRequest


class DanluPackScorer(FgdScorer):
    """FGD's fragmentation buckets with a packing tie-break (see the module docstring)."""

    name: ClassVar[str] = "danlu"

    def __init__(self, typical: TypicalPods) -> None:
        super().__init__(typical, quantize=True)

    def score(
        self,
        cluster: ShareCluster,
        request: ShareRequest,
        nodes: IntArray,
        rng: np.random.Generator,
    ) -> FloatArray:
        base = super().score(cluster, request, nodes, rng)
        gpu_cap = np.maximum(cluster.num_gpu[nodes] * 1000, 1)
        gpu_left = (cluster.gpu_free_total[nodes] - request.total_gpu_milli) / gpu_cap
        cpu_left = (cluster.cpu_free[nodes] - request.cpu_milli) / np.maximum(
            cluster.cpu_cap[nodes], 1
        )
        tie: FloatArray = 0.4 * (1.0 - np.clip(gpu_left, 0.0, 1.0)) + 0.1 * (
            1.0 - np.clip(cpu_left, 0.0, 1.0)
        )
        out: FloatArray = base + tie
        return out
