"""Tests of the batch, accumulation and GPU-count optimisers (danlu.estimate.optimize)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.errors import SpecError
from danlu.estimate.optimize import (
    MemoryModel,
    best_batch,
    cost_optimal_gpu_count,
    fastest_batch,
    largest_batch,
    parallel_efficiency,
    plan_accumulation,
    training_time,
)
from danlu.estimate.throughput import ThroughputModel, ThroughputParams

GiB = 1 << 30
PARAMS = ThroughputParams(
    alpha_c=0.02, beta_c=0.001, alpha_n=0.12, beta_n=0.004, alpha_r=0.03, beta_r=0.002, gamma=2.5
)


@dataclass(frozen=True)
class PiecewiseMemory:
    """M(b) = max(step, c0 + a * b): the shape of the fitted memory model."""

    step: int
    c0: int
    a: int

    def predict(self, batch_size: int) -> int:
        return max(self.step, self.c0 + self.a * batch_size)

    def max_batch(self, limit_bytes: int, margin_bytes: int = 0) -> int | None:
        budget = limit_bytes - margin_bytes
        if self.predict(1) > budget:
            return None
        return max(1, (budget - self.c0) // self.a)


@dataclass(frozen=True)
class OptimisticMemory(PiecewiseMemory):
    """A model whose max_batch over-promises by ``extra``: the optimiser must not trust it."""

    extra: int = 5

    def max_batch(self, limit_bytes: int, margin_bytes: int = 0) -> int | None:
        b = super().max_batch(limit_bytes, margin_bytes)
        return None if b is None else b + self.extra


memories = st.builds(
    PiecewiseMemory,
    step=st.integers(0, 4 * GiB),
    c0=st.integers(0, 4 * GiB),
    a=st.integers(1, 64 << 20),
)


def test_protocol_is_structural() -> None:
    assert isinstance(PiecewiseMemory(0, 0, 1), MemoryModel)


# --- largest batch ----------------------------------------------------------------------


def test_largest_batch_by_hand() -> None:
    m = PiecewiseMemory(step=10 * GiB, c0=4 * GiB, a=GiB // 4)
    # 4 GiB + b/4 GiB <= 80 - 4 GiB  ->  b <= 288
    assert largest_batch(m, 80 * GiB, 4 * GiB) == 288
    assert largest_batch(m, 80 * GiB, 4 * GiB, upper=100) == 100
    assert largest_batch(m, 9 * GiB) is None  # the flat optimizer-step part does not fit


@settings(max_examples=150, deadline=None)
@given(
    memory=memories,
    limit=st.integers(1, 96 * GiB),
    margin=st.integers(0, 8 * GiB),
    extra=st.integers(0, 50),
)
def test_largest_batch_never_exceeds_the_limit(
    memory: PiecewiseMemory, limit: int, margin: int, extra: int
) -> None:
    model = OptimisticMemory(memory.step, memory.c0, memory.a, extra)
    b = largest_batch(model, limit, margin)
    budget = limit - margin
    if b is None:
        assert memory.predict(1) > budget
    else:
        assert memory.predict(b) <= budget < memory.predict(b + 1)  # the largest that fits


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"limit_bytes": 0}, "limit_bytes"),
        ({"limit_bytes": GiB, "margin_bytes": -1}, "margin_bytes"),
        ({"limit_bytes": GiB, "upper": 0}, "upper"),
    ],
)
def test_largest_batch_validation(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(SpecError) as info:
        largest_batch(PiecewiseMemory(0, 0, 1), **kwargs)
    assert info.value.field == field


# --- best / fastest batch ---------------------------------------------------------------


def test_best_batch_maximises_score_under_memory() -> None:
    m = PiecewiseMemory(step=0, c0=0, a=GiB)
    peaked = best_batch(lambda b: -((b - 20) ** 2), 64)
    assert peaked == 20
    # memory caps at 10: the best feasible is the boundary
    assert best_batch(lambda b: -((b - 20) ** 2), 64, memory=m, limit_bytes=10 * GiB) == 10
    assert best_batch(lambda b: 1.0, 64, memory=m, limit_bytes=GiB // 2) is None
    with pytest.raises(SpecError, match="limit_bytes"):
        best_batch(lambda b: 1.0, 64, memory=m)


@settings(max_examples=50, deadline=None)
@given(memory=memories, limit=st.integers(1, 96 * GiB), replicas=st.integers(1, 16))
def test_fastest_batch_fits_and_is_fastest(
    memory: PiecewiseMemory, limit: int, replicas: int
) -> None:
    model = ThroughputModel(PARAMS)
    nodes = max(1, replicas // 4)
    b = fastest_batch(model, nodes, replicas, 256, memory=memory, limit_bytes=limit)
    cap = largest_batch(memory, limit, upper=256)
    if cap is None:
        assert b is None
        return
    assert b is not None and memory.predict(b) <= limit
    rate = model.throughput(b, nodes, replicas)
    assert all(rate >= model.throughput(x, nodes, replicas) for x in range(1, cap + 1))


# --- accumulation -----------------------------------------------------------------------


def test_accumulation_by_hand() -> None:
    p = plan_accumulation(1000, 4, 64)
    # 250 per replica, 4 micro-batches of ceil(62.5) = 63 -> 1008 trained (rounded up by 8)
    assert (p.micro_batch, p.accum_steps, p.global_batch) == (63, 4, 1008)
    e = plan_accumulation(1000, 4, 64, exact=True)
    # 250 per replica: 4 does not divide 250, 5 does -> 50 x 5 x 4 = 1000
    assert (e.micro_batch, e.accum_steps, e.global_batch) == (50, 5, 1000)
    assert plan_accumulation(256, 8, 64).accum_steps == 1


@settings(max_examples=200, deadline=None)
@given(
    global_batch=st.integers(1, 100_000),
    replicas=st.integers(1, 64),
    max_micro=st.integers(1, 1024),
    exact=st.booleans(),
)
def test_accumulation_keeps_the_global_batch(
    global_batch: int, replicas: int, max_micro: int, exact: bool
) -> None:
    if global_batch < replicas or (exact and global_batch % replicas):
        with pytest.raises(SpecError, match="global_batch"):
            plan_accumulation(global_batch, replicas, max_micro, exact=exact)
        return
    p = plan_accumulation(global_batch, replicas, max_micro, exact=exact)
    assert 1 <= p.micro_batch <= max_micro
    assert p.global_batch == p.micro_batch * p.accum_steps * replicas
    if exact:
        assert p.global_batch == global_batch
    else:
        assert global_batch <= p.global_batch < global_batch + replicas * p.accum_steps
        # the fewest micro-batches that can fit
        assert p.accum_steps == -(-global_batch // (replicas * max_micro))


# --- GPU count --------------------------------------------------------------------------


def test_parallel_efficiency_and_training_time() -> None:
    model = ThroughputModel(PARAMS)
    assert parallel_efficiency(model, 32, 1, 8) == pytest.approx(1.0)
    effs = [parallel_efficiency(model, 32, k, 4) for k in (2, 4, 8, 16)]
    assert all(0 < e < 1 for e in effs)
    assert effs[2] < effs[1]  # crossing to a second node costs efficiency
    assert training_time(100.0, 4, 0.5) == pytest.approx(50.0)
    with pytest.raises(SpecError, match="efficiency"):
        training_time(100.0, 4, 1.5)
    with pytest.raises(SpecError, match="t0"):
        training_time(0.0, 4, 0.5)
    with pytest.raises(SpecError, match="t0"):
        training_time(math.nan, 4, 0.5)
    with pytest.raises(SpecError, match=r"num_gpus: must be a positive integer, got 2\.5"):
        training_time(100.0, 2.5, 0.5)  # type: ignore[arg-type]
    assert training_time(100.0, np.int64(4), 0.5) == pytest.approx(50.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [2.5, math.nan, True, "4"])
def test_accumulation_refuses_a_micro_batch_that_is_not_a_whole_number(bad: object) -> None:
    """A float limit made a plan of float micro-batches (2.5 gave 1.0 x 1.0), NaN failed
    an internal assert."""
    with pytest.raises(SpecError, match="max_micro_batch: must be a positive integer"):
        plan_accumulation(8, 1, bad)  # type: ignore[arg-type]


def test_cost_optimal_gpu_count() -> None:
    t0 = 3600.0 * 100

    def eff(k: int) -> float:
        return 1.0 / (1.0 + 0.05 * (k - 1))

    def time_s(k: int) -> float:
        return training_time(t0, k, eff(k))

    # with a pure per-GPU price, E(K) < 1 makes one GPU the cheapest
    assert cost_optimal_gpu_count(range(1, 65), time_s, lambda k: 2.0 * k).num_gpus == 1
    # a fixed per-job rate (e.g. the node's CPUs, storage) makes more GPUs pay:
    # cost = (p K + f) * t0 (1 + a (K-1)) / K, minimised near K = sqrt(f (1-a) / (p a))
    # (here sqrt(50 * 0.95 / 0.1) = 21.8; the integer optimum is 22)
    choice = cost_optimal_gpu_count(range(1, 65), time_s, lambda k: 2.0 * k + 50.0)
    assert choice.num_gpus == 22
    assert choice.total_cost == pytest.approx((2.0 * 22 + 50.0) * time_s(22))
    assert all(choice.total_cost <= (2.0 * k + 50.0) * time_s(k) for k in range(1, 65))
    # exact ties (K = 19 and 20 cost the same with f = 40) go to the faster choice
    assert cost_optimal_gpu_count(range(1, 65), time_s, lambda k: 2.0 * k + 40.0).num_gpus == 20
    # a deadline excludes the slow, cheap options
    fast = cost_optimal_gpu_count(range(1, 65), time_s, lambda k: 2.0 * k, deadline_s=t0 / 10)
    assert fast.time_s <= t0 / 10 and fast.num_gpus == 19  # the smallest K meeting it
    with pytest.raises(SpecError, match="deadline_s"):
        cost_optimal_gpu_count([1, 2], time_s, lambda k: 1.0, deadline_s=1.0)
    with pytest.raises(SpecError, match="candidates"):
        cost_optimal_gpu_count([], time_s, lambda k: 1.0)
