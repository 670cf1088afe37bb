""":func:`danlu.estimate.optimize.cost_optimal_gpu_count` with times and cost rates that are
not usable numbers."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.estimate.optimize import cost_optimal_gpu_count


def _time(bad: float) -> Callable[[int], float]:
    """10 / K hours of training, except ``bad`` on one GPU."""
    return lambda k: bad if k == 1 else 36_000.0 / k


@pytest.mark.parametrize("bad", [math.nan, 0.0, -1.0])
def test_a_time_that_is_no_training_time_is_refused(bad: float) -> None:
    # NaN (and 0, or a negative time) on the first candidate won every later comparison
    with pytest.raises(SpecError) as err:
        cost_optimal_gpu_count([1, 2, 4], _time(bad), lambda k: 1.0 * k)
    assert err.value.field == "time_s"
    assert "K=1" in str(err.value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -2.0, "3", True])
def test_a_cost_rate_that_is_no_price_is_refused(bad: Any) -> None:
    with pytest.raises(SpecError) as err:
        cost_optimal_gpu_count([1, 2, 4], _time(100.0), lambda k: bad if k == 2 else 1.0 * k)
    assert err.value.field == "cost_rate"


def test_an_infinite_time_is_a_count_that_cannot_train() -> None:
    # a free GPU that never finishes: 0 * inf was a NaN total cost, chosen as the best
    choice = cost_optimal_gpu_count(
        [1, 2, 4], _time(math.inf), lambda k: 0.0 if k == 1 else 2.0 + k
    )
    assert choice.num_gpus == 4
    assert choice.total_cost == pytest.approx((2.0 + 4) * 9_000.0)
    with pytest.raises(SpecError) as err:
        cost_optimal_gpu_count([1], _time(math.inf), lambda k: 1.0)
    assert err.value.field == "time_s"


def test_valid_inputs_choose_as_before() -> None:
    choice = cost_optimal_gpu_count([1, 2, 4, 8], lambda k: 100.0 / (k * 0.9), lambda k: 5 + k)
    assert choice.num_gpus == 8
    assert choice.total_cost == pytest.approx((5 + 8) * 100.0 / 7.2)
    # E(K) = 1 / (1 + K / 10): each GPU more costs more, so the fewest that meet the deadline
    time_s = lambda k: 100.0 * (1 + k / 10) / k  # noqa: E731
    choice = cost_optimal_gpu_count([1, 2, 4, 8], time_s, lambda k: float(k), deadline_s=40.0)
    assert choice.num_gpus == 4 and choice.time_s == pytest.approx(35.0)
