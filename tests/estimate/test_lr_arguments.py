"""The learning-rate rules (danlu.estimate.lr) refuse arguments that are not numbers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from danlu.core.errors import SpecError
from danlu.estimate.lr import linear_lr, scale_lr, sqrt_lr


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((0.1, True, 32), "batch_size"),  # True scaled as a batch of 1
        ((True, 64, 32), "base_lr"),
        ((0.1, 64, False), "base_batch_size"),
        ((0.1, "64", 32), "batch_size"),  # a TypeError from math.isfinite before
        ((None, 64, 32), "base_lr"),
    ],
)
def test_a_rule_names_an_argument_that_is_not_a_number(args: tuple[Any, ...], field: str) -> None:
    calls: list[Callable[[], float]] = [
        lambda: linear_lr(*args),
        lambda: sqrt_lr(*args),
        lambda: scale_lr("progressive", *args, c=2.0),
    ]
    for call in calls:
        with pytest.raises(SpecError) as err:
            call()
        assert err.value.field == field


def test_numpy_numbers_are_numbers() -> None:
    batch: Any = np.int64(64)
    lr: Any = np.float32(0.1)
    base: Any = np.int32(32)
    assert linear_lr(0.1, batch, 32) == pytest.approx(0.2)
    assert sqrt_lr(lr, 128, base) == pytest.approx(0.2)
