"""The batch searches over very wide ranges (a max batch of 2**30, as a spec allows), and
the in-process tuner's small batches under its default micro-batch limit."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from danlu.estimate.adapt import BatchLimits, SelfTuner
from danlu.estimate.goodput import GoodputModel, GradientStats, optimize_goodput
from danlu.estimate.optimize import _smallest_divisor_from, fastest_batch, plan_accumulation
from danlu.estimate.throughput import ThroughputModel, ThroughputParams

HUGE = 1 << 30
MODEL = ThroughputModel(ThroughputParams(0.01, 0.001, 0.05, 0.001, 0.02, 0.0005, 2.0))
LARGEST_ARRAY = 1 << 20


@pytest.fixture
def small_arrays(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail any np.arange longer than LARGEST_ARRAY: the searches must not build one array
    over the whole range (2**30 int64 is 8 GiB)."""
    real = np.arange

    def arange(*args: Any, **kwargs: Any) -> Any:
        start, stop = (0, args[0]) if len(args) == 1 else (args[0], args[1])
        step = args[2] if len(args) > 2 else 1
        size = math.ceil((stop - start) / step)
        assert size <= LARGEST_ARRAY, f"an array of {size} batches"  # checked before building
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "arange", arange)
    yield


@pytest.mark.parametrize(("nodes", "replicas"), [(1, 1), (2, 8)])
@pytest.mark.parametrize(("sqr", "var"), [(1.0, 10.0), (1.0, 0.0), (0.0, 0.0), (0.01, 1000.0)])
def test_optimize_goodput_under_a_huge_max_batch_is_the_optimum_of_the_useful_range(
    small_arrays: None, nodes: int, replicas: int, sqr: float, var: float
) -> None:
    model = GoodputModel(MODEL, GradientStats(sqr, var), init_batch_size=32)
    huge = optimize_goodput(model, nodes, replicas, max_batch_size=HUGE, max_local_bsz=64)
    # the same answer as a search over a range that certainly holds the optimum
    bounded = optimize_goodput(model, nodes, replicas, max_batch_size=200_000, max_local_bsz=64)
    assert huge is not None and huge == bounded
    assert huge.global_batch < 200_000


def test_fastest_batch_under_a_huge_cap(small_arrays: None) -> None:
    best = fastest_batch(MODEL, 2, 8, HUGE)
    assert best is not None
    # throughput grows with the batch in this model: the answer is at the top of the range
    assert best > HUGE - LARGEST_ARRAY
    rate = MODEL.throughput(best, 2, 8)
    assert rate >= MODEL.throughput(HUGE - LARGEST_ARRAY, 2, 8)


def test_fastest_batch_small_caps_unchanged() -> None:
    for cap in (1, 2, 7, 300, 70_000):
        rates = [MODEL.throughput(b, 1, 2) for b in range(1, cap + 1)] if cap < 1000 else None
        best = fastest_batch(MODEL, 1, 2, cap)
        assert best is not None and 1 <= best <= cap
        if rates is not None:
            assert best == 1 + int(np.argmax(rates))


@pytest.mark.parametrize("placement", [(1,), (4, 4)])
def test_the_tuner_under_a_huge_max_batch(small_arrays: None, placement: tuple[int, ...]) -> None:
    def tuner(top: int) -> SelfTuner:
        t = SelfTuner(BatchLimits(32, top, 1, 64))
        t.measure(placement, 16, 0.05, 0.02 if sum(placement) > 1 else 0.0, (1.0, 1000.0))
        return t

    chosen = tuner(HUGE).choose(placement)
    assert chosen is not None and chosen == tuner(500_000).choose(placement)
    assert 32 <= chosen < 500_000


@pytest.mark.parametrize("placement", [(1,), (2,), (2, 2)])
def test_the_tuner_keeps_small_batches_under_its_default_micro_batch_limit(
    placement: tuple[int, ...],
) -> None:
    # no gradient noise: a larger batch makes no more progress per step, the smallest wins.
    # The default max_local (2**31 - 1) made every total below 22 samples per replica zero
    # micro-batches, dropping them from the choice.
    replicas = sum(placement)
    for limits in (BatchLimits(8, 64), BatchLimits(8, 64, 1, 64)):
        t = SelfTuner(limits)
        t.measure(placement, 4, 0.1, 0.01 if replicas > 1 else 0.0, (1.0, 0.0))
        assert t.choose(placement) == max(8, replicas)


def test_exact_accumulation_finds_the_smallest_divisor() -> None:
    for n in range(1, 150):
        for low in range(1, n + 2):
            expected = next((d for d in range(low, n + 1) if n % d == 0), n)
            assert _smallest_divisor_from(n, low) == expected
    # a prime per replica: one sample per micro-batch (counting up took seconds)
    plan = plan_accumulation(2 * 100_000_007, 2, 2, exact=True)
    assert (plan.micro_batch, plan.accum_steps) == (1, 100_000_007)
    assert plan.global_batch == 2 * 100_000_007
