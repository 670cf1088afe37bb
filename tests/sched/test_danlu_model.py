"""The danlu policy's throughput model: ``JobModel.best_batch`` (an inlined loop) picks exactly
what scoring every candidate through ``split_batch`` and ``goodput`` picks."""

from __future__ import annotations

import math
import random

import pytest

from danlu.sched.policies.danlu_model import JobModel, split_batch


def _reference(model: JobModel, replicas: int, gpn: int, nodes: int | None) -> tuple[float, int]:
    if nodes is None:
        nodes = max(1, math.ceil(replicas / gpn))
    best = (0.0, 0)
    for batch in model._candidates(replicas):
        split = split_batch(replicas, batch, model.max_local, model.init_batch, model.max_batch)
        if split.atomic < model.min_local or split.batch < model.init_batch:
            continue
        good = model.goodput(nodes, split)
        if good > best[0]:
            best = (good, split.batch)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_best_batch_equals_scoring_every_split(seed: int) -> None:
    rng = random.Random(seed)
    checked = 0
    for _ in range(200):
        min_local = rng.choice([1, 2, 8, 16, 32])
        max_local = min_local * rng.choice([1, 2, 4, 16, 64])
        init = rng.choice([min_local, min_local * 2, 64, 128, 512])
        model = JobModel(
            init_batch=init,
            max_batch=init * rng.choice([1, 2, 8, 32, 256]),
            min_local=min_local,
            max_local=max_local,
            alpha=rng.uniform(0, 0.05),
            beta=rng.uniform(0, 0.002),
            sync_fit={
                "i": (rng.uniform(0, 0.05), rng.uniform(0, 0.01)),
                "x": (rng.uniform(0, 0.2), rng.uniform(0, 0.05)),
            },
            grad_sqr=rng.choice([0.0, rng.uniform(0.01, 10)]),
            grad_var=rng.choice([0.0, rng.uniform(0.01, 1000)]),
            max_replicas_seen=1,
        )
        replicas = rng.choice([1, 2, 3, 4, 8, 12, 16, 32])
        nodes = rng.choice([None, 1, 2, 4])
        got = model.best_batch(replicas, 4, nodes)
        assert got == _reference(model, replicas, 4, nodes)  # the same floats, exactly
        checked += got[1] > 0
    assert checked > 50  # most draws have a valid batch: the comparison is not vacuous
