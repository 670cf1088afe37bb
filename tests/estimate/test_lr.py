"""Tests of the learning-rate co-scaling rules (danlu.estimate.lr)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.errors import SpecError, UnknownNameError
from danlu.estimate.goodput import GradientStats
from danlu.estimate.lr import (
    LRScaling,
    adascale_lr,
    linear_lr,
    progressive_lr,
    rule_names,
    scale_lr,
    sqrt_lr,
)


def test_rules_by_hand() -> None:
    assert linear_lr(0.1, 1024, 256) == pytest.approx(0.4)
    assert sqrt_lr(0.1, 1024, 256) == pytest.approx(0.2)
    # c = 1.5: linear up to k = 2.25, then 1.5 * sqrt(k)
    assert progressive_lr(0.1, 512, 256, c=1.5) == pytest.approx(0.2)  # min(2, 2.12)
    assert progressive_lr(0.1, 1024, 256, c=1.5) == pytest.approx(0.3)  # min(4, 3)
    # AdaScale: gain = (var + sqr) / (var / 4 + sqr) = 4 / 1.75
    stats = GradientStats(sqr=1.0, var=3.0)
    assert adascale_lr(0.1, 1024, 256, stats) == pytest.approx(0.1 * 4 / 1.75)


@settings(max_examples=100, deadline=None)
@given(
    lr=st.floats(1e-6, 10.0),
    b0=st.integers(1, 4096),
    k=st.floats(1.0, 256.0),
    c=st.floats(0.1, 16.0),
    sqr=st.floats(0.0, 100.0),
    var=st.floats(0.0, 100.0),
)
def test_rule_ordering(lr: float, b0: int, k: float, c: float, sqr: float, var: float) -> None:
    batch = b0 * k
    lin = linear_lr(lr, batch, b0)
    root = sqrt_lr(lr, batch, b0)
    prog = progressive_lr(lr, batch, b0, c)
    ada = adascale_lr(lr, batch, b0, GradientStats(sqr, var))
    tol = 1 + 1e-9
    assert lr <= root * tol and root <= lin * tol  # growing the batch never lowers the LR
    assert prog <= lin * tol
    assert prog == pytest.approx(lin if k <= c * c else c * root)
    assert lr / tol <= ada <= lin * tol  # AdaScale's gain lies in [1, k]


def test_progressive_is_continuous_at_the_crossover() -> None:
    c = 2.0
    k = c * c
    below = progressive_lr(1.0, k * (1 - 1e-9), 1, c)
    above = progressive_lr(1.0, k * (1 + 1e-9), 1, c)
    assert below == pytest.approx(above, rel=1e-6)
    assert progressive_lr(1.0, k, 1, c) == pytest.approx(4.0)


def test_scale_lr_dispatch_and_aliases() -> None:
    stats = GradientStats(sqr=1.0, var=0.0)
    assert scale_lr("linear", 0.1, 512, 128) == pytest.approx(0.4)
    assert scale_lr("SQRT", 0.1, 512, 128) == pytest.approx(0.2)
    assert scale_lr("square_root", 0.1, 512, 128) == pytest.approx(0.2)
    assert scale_lr(LRScaling.PROGRESSIVE, 0.1, 512, 128, c=1.0) == pytest.approx(0.2)
    # no gradient noise: larger batches bring no gain, AdaScale keeps the LR
    assert scale_lr("adascale", 0.1, 512, 128, grad_stats=stats) == pytest.approx(0.1)
    assert rule_names() == ["adascale", "linear", "progressive", "sqrt"]


def test_unknown_rule_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        scale_lr("cubic", 0.1, 512, 128)
    message = str(info.value)
    assert "'cubic'" in message
    for name in rule_names():
        assert name in message
    assert isinstance(info.value, KeyError)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: scale_lr("progressive", 0.1, 512, 128), "c"),
        (lambda: scale_lr("adascale", 0.1, 512, 128), "grad_stats"),
        (lambda: progressive_lr(0.1, 512, 128, c=0.0), "c"),
        (lambda: progressive_lr(0.1, 512, 128, c=math.nan), "c"),
        (lambda: linear_lr(-0.1, 512, 128), "base_lr"),
        (lambda: sqrt_lr(0.1, 0, 128), "batch_size"),
        (lambda: linear_lr(0.1, 512, 0), "base_batch_size"),
        (lambda: linear_lr(0.1, math.inf, 128), "batch_size"),  # was an infinite rate
        (lambda: sqrt_lr(0.1, 512, math.nan), "base_batch_size"),
    ],
)
def test_invalid_arguments_name_the_field(call: Callable[[], float], field: str) -> None:
    with pytest.raises(SpecError) as info:
        call()
    assert info.value.field == field
