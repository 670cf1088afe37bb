"""The danlu policy's throughput model: ``JobModel.best_batch`` (an inlined loop) picks exactly
what scoring every candidate through ``split_batch`` and ``goodput`` picks."""

from __future__ import annotations

import math
import random

import pytest

from danlu.sched.policies.danlu_model import JobModel, build, remembered, split_batch


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


LIMITS = {"init_batch": 8.0, "max_batch": 512.0, "min_local_bsz": 4.0, "max_local_bsz": 8.0}
MARKS = {
    "danlu.c:8": 0.38,
    "danlu.s:i:4": 0.12,
    "danlu.s:x:2": 0.5,  # 2 GPUs on 2 nodes
    "danlu.s:x:3": 0.8,  # 3 GPUs on 2 nodes: the line climbs 0.3 s per replica
    "danlu.maxr": 4.0,
    "danlu.sqr": 1.0,
    "danlu.var": 1000.0,  # noisy gradients: bigger batches pay off
}


def test_flat_sync_holds_the_inter_node_sync_beyond_the_measured_replicas() -> None:
    """Without ``flat_sync`` the inter-node line through 2 and 3 replicas is extrapolated
    (16 replicas: 0.5 + 0.3 * 14 s); with it the sync stays at its value at 3 replicas,
    the most measured across nodes. Measured counts and intra-node sync are unchanged."""
    line = build(MARKS, LIMITS)
    flat = build(MARKS, LIMITS, flat_sync=True)
    assert line is not None and flat is not None
    assert line.sync_time(4, 16) == pytest.approx(0.5 + 0.3 * 14)
    assert flat.sync_time(4, 16) == pytest.approx(0.8)
    for nodes, replicas in ((2, 2), (2, 3), (1, 4), (1, 3), (1, 1)):
        assert flat.sync_time(nodes, replicas) == pytest.approx(line.sync_time(nodes, replicas))
    # so a second node looks worth it only with it: 8 GPUs beat one node's 4 only when flat
    assert flat.best_batch(8, 4)[0] > flat.best_batch(4, 4)[0]
    assert line.best_batch(8, 4)[0] < line.best_batch(4, 4)[0]


def test_flat_sync_leaves_an_unmeasured_inter_node_prior_alone() -> None:
    """Only a measured inter-node kind is held: the prior derived from intra-node sync is
    the same either way."""
    marks = {k: v for k, v in MARKS.items() if not k.startswith("danlu.s:x")}
    line = build(marks, LIMITS, optimistic=True)
    flat = build(marks, LIMITS, optimistic=True, flat_sync=True)
    assert line is not None and flat is not None
    assert flat.sync_span == {}
    assert flat.sync_time(8, 32) == line.sync_time(8, 32)


def _measured(nodes: int, replicas: int, sync: float) -> dict[str, float]:
    return {
        "step_time": 0.38 + sync,
        "sync_time": sync,
        "local_bsz": 8.0,
        "num_replicas": float(replicas),
        "num_nodes": float(nodes),
    }


def test_a_split_placement_is_kept_off_the_inter_node_line() -> None:
    """With the GPUs per node given, 2 and 3 replicas on 2 nodes of 4 GPUs (placements split
    although one node could hold them) are remembered apart (``danlu.s:f:``) and left out of
    the model, whose inter-node line is then the prior; 8 replicas on 2 nodes are packed and
    go on the line. Without the GPUs per node every multi-node sync is on the line."""
    marks: dict[str, float] = {"danlu.c:8": 0.38, "danlu.s:i:4": 0.12}
    for nodes, replicas, sync in ((2, 2, 0.5), (2, 3, 0.8)):
        update = remembered(marks, _measured(nodes, replicas, sync), 4)
        assert update[f"danlu.s:f:{replicas}"] == sync
        assert not any(key.startswith("danlu.s:x") for key in update)
        marks.update(update)
    split = build(marks, LIMITS)
    prior = build({k: v for k, v in marks.items() if not k.startswith("danlu.s:f")}, LIMITS)
    assert split is not None and prior is not None
    assert split.sync_fit == prior.sync_fit
    assert split.max_replicas_seen == 3  # the compute measured there still counts
    # on the line, the two splits make 2 packed nodes (8 GPUs) look slower than they would
    on_line = {key.replace("danlu.s:f", "danlu.s:x"): v for key, v in marks.items()}
    optimistic, climbing = build(marks, LIMITS, True), build(on_line, LIMITS, True)
    assert optimistic is not None and climbing is not None
    assert climbing.sync_time(2, 8) == pytest.approx(0.5 + 0.3 * 6)
    assert optimistic.best_batch(8, 4)[0] > climbing.best_batch(8, 4)[0]
    packed = remembered(marks, _measured(2, 8, 0.9), 4)
    assert packed["danlu.s:x:8"] == 0.9
    assert build({**marks, **packed}, LIMITS).sync_time(2, 8) == pytest.approx(0.9)
    assert "danlu.s:x:3" in remembered({}, _measured(2, 3, 0.8))  # no GPUs per node given
