"""The learning-rate rules on numbers at the ends of a float's range: each argument was a
positive finite number, but the answer was not (``linear_lr(1e300, 1e10, 1e-10)`` returned
``inf``, ``linear_lr(1e-300, 1e-200, 1e100)`` returned 0.0): a learning rate that trains
nothing or diverges at once. Now a :class:`SpecError` naming the argument; ordinary
arguments give the answers they gave."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from danlu.core.errors import SpecError
from danlu.estimate.goodput import GradientStats
from danlu.estimate.lr import adascale_lr, linear_lr, progressive_lr, scale_lr, sqrt_lr


@pytest.mark.parametrize(
    ("rule", "args", "field"),
    [
        (linear_lr, (1e300, 1e10, 1e-10), "base_lr"),
        (linear_lr, (1e-300, 1e-200, 1e100), "base_lr"),
        (linear_lr, (0.1, 1e308, 1e-308), "batch_size"),
        (sqrt_lr, (1.0, 1e308, 1e-308), "batch_size"),
        (sqrt_lr, (1e308, 1e10, 1e-10), "base_lr"),
        (progressive_lr, (1e308, 1e10, 1e-10, 1e10), "base_lr"),
        (progressive_lr, (0.1, 1.0, 100.0, 5e-324), "c"),
        (adascale_lr, (1e308, 1e10, 1, GradientStats(sqr=0.0, var=1.0)), "base_lr"),
    ],
)
def test_an_answer_beyond_a_float_s_range_is_refused(
    rule: Callable[..., float], args: tuple[object, ...], field: str
) -> None:
    with pytest.raises(SpecError) as info:
        rule(*args)
    assert info.value.field == field


def test_scale_lr_refuses_an_infinite_learning_rate() -> None:
    with pytest.raises(SpecError):
        scale_lr("linear", 1e300, 1e10, 1)


def test_ordinary_arguments_give_the_answers_they_gave() -> None:
    assert linear_lr(0.1, 256, 32) == pytest.approx(0.8)
    assert sqrt_lr(0.1, 128, 32) == pytest.approx(0.2)
    assert progressive_lr(0.1, 1024, 32, 2.0) == pytest.approx(0.1 * 2 * math.sqrt(32))
    assert linear_lr(1e-300, 2, 1) == 2e-300  # tiny, but a positive learning rate
    stats = GradientStats(sqr=1.0, var=1.0)
    assert 0.1 < adascale_lr(0.1, 64, 32, stats) < 0.2
