"""Numbers given as strings, None or bools to the estimators: a SpecError naming the
argument, never a bare TypeError / AttributeError / OverflowError or a bool read as 1."""

from __future__ import annotations

import math
from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.estimate.goodput import GoodputModel, GradientStats, efficiency, gain
from danlu.estimate.lr import adascale_lr, progressive_lr, scale_lr
from danlu.estimate.optimize import best_batch, cost_optimal_gpu_count, training_time
from danlu.estimate.throughput import ThroughputModel, ThroughputParams

NOT_NUMBERS: list[Any] = ["1", None, True, [1.0]]


@pytest.mark.parametrize("value", NOT_NUMBERS)
@pytest.mark.parametrize("field", ["sqr", "var"])
def test_gradient_stats_refuse_what_is_not_a_number(field: str, value: Any) -> None:
    values: dict[str, Any] = {"sqr": 1.0, "var": 1.0, field: value}
    with pytest.raises(SpecError, match=rf"grad_stats\.{field}"):
        GradientStats(**values)


@pytest.mark.parametrize("value", NOT_NUMBERS)
@pytest.mark.parametrize("function", [gain, efficiency])
def test_gain_and_efficiency_refuse_a_batch_size_that_is_not_a_number(
    function: Any, value: Any
) -> None:
    with pytest.raises(SpecError, match="batch_size"):
        function(GradientStats(1.0, 1.0), value, 32)


@pytest.mark.parametrize("c", NOT_NUMBERS)
def test_progressive_factor_must_be_a_number(c: Any) -> None:
    with pytest.raises(SpecError, match=r"^c: "):
        progressive_lr(0.1, 64, 32, c)
    if c is not None:  # scale_lr reads c=None as "missing", with its own message
        with pytest.raises(SpecError, match=r"^c: "):
            scale_lr("progressive", 0.1, 64, 32, c=c)


def test_progressive_factor_still_accepts_numbers() -> None:
    assert progressive_lr(0.1, 64, 32, 2) == pytest.approx(0.2)
    assert progressive_lr(0.1, 512, 32, 2.0) == pytest.approx(0.1 * 2.0 * 4.0)


@pytest.mark.parametrize("stats", [(1.0, 1.0), {"sqr": 1.0, "var": 1.0}, 1.0])
def test_adascale_needs_gradient_stats(stats: Any) -> None:
    with pytest.raises(SpecError, match="grad_stats"):
        adascale_lr(0.1, 64, 32, stats)
    with pytest.raises(SpecError, match="grad_stats"):
        scale_lr("adascale", 0.1, 64, 32, grad_stats=stats)


@pytest.mark.parametrize("t0", NOT_NUMBERS)
def test_training_time_refuses_a_t0_that_is_not_a_number(t0: Any) -> None:
    with pytest.raises(SpecError, match="t0"):
        training_time(t0, 2, 0.9)


@pytest.mark.parametrize("eff", NOT_NUMBERS)
def test_training_time_refuses_an_efficiency_that_is_not_a_number(eff: Any) -> None:
    with pytest.raises(SpecError, match="efficiency"):
        training_time(100.0, 2, eff)


def test_training_time_still_accepts_numbers() -> None:
    assert training_time(100, 2, 1) == 50.0
    assert training_time(100.0, 4, 0.5) == 50.0


def test_cost_optimal_gpu_count_reads_an_integer_beyond_float_range_as_infinite() -> None:
    # float(10**400) raised OverflowError; such a time is as good as infinite (not eligible)
    times = {1: 10**400, 2: 50.0}
    choice = cost_optimal_gpu_count([1, 2], times.__getitem__, lambda k: 1.0 * k)
    assert choice.num_gpus == 2 and choice.time_s == 50.0
    with pytest.raises(SpecError, match="cost_rate"):
        cost_optimal_gpu_count([1], lambda k: 10.0, lambda k: 10**400)


def test_an_integer_beyond_float_range_is_refused_by_name() -> None:
    with pytest.raises(SpecError, match=r"grad_stats\.sqr"):
        GradientStats(10**400, 1.0)
    with pytest.raises(SpecError, match="t0"):
        training_time(10**400, 1, 1.0)


@pytest.mark.parametrize("stats", [(1.0, 1.0), None])
def test_goodput_model_needs_gradient_stats(stats: Any) -> None:
    # AttributeError at the first goodput
    model = ThroughputModel(ThroughputParams(0.01, 0.001, 0.05, 0.001, 0.02, 0.0005, 2.0))
    with pytest.raises(SpecError, match="grad_stats"):
        GoodputModel(model, stats, 32)


@pytest.mark.parametrize("bad", [float("nan"), "fast", None, True])
def test_best_batch_refuses_a_score_that_is_not_a_number(bad: Any) -> None:
    # a NaN lost every comparison, so the smallest batch came back; a string: TypeError
    def score(b: int) -> Any:
        return bad if b == 3 else float(b)

    with pytest.raises(SpecError, match=r"^score: returned .* for b=3"):
        best_batch(score, 8)


def test_best_batch_still_takes_infinite_scores() -> None:
    assert best_batch(lambda b: -math.inf if b > 2 else float(b), 8) == 2
    assert best_batch(lambda b: b, 8) == 8


@pytest.mark.parametrize(
    ("args", "field"),
    [((10**400, 64, 32), "base_lr"), ((0.1, 10**400, 32), "batch_size")],
)
def test_lr_rules_refuse_an_integer_beyond_float_range(
    args: tuple[float, float, int], field: str
) -> None:
    # math.isfinite(10**400) raised OverflowError
    with pytest.raises(SpecError, match=f"^{field}: "):
        scale_lr("linear", *args)
