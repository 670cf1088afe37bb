"""``SimConfig(max_time=nan)`` is refused naming ``max_time``: NaN compares false with
every instant, so it was taken and ran as no limit at all."""

from __future__ import annotations

import math

import pytest

from danlu.core.errors import ConfigError
from danlu.sim.config import SimConfig


def test_a_nan_max_time_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_time must be a number of seconds"):
        SimConfig(max_time=math.nan)


@pytest.mark.parametrize("max_time", [0.0, 200.0, math.inf])
def test_a_number_or_no_limit_is_taken(max_time: float) -> None:
    assert SimConfig(max_time=max_time).max_time == max_time
