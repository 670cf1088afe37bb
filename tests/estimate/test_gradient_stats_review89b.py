"""Gradient statistics at the edges: both near a float's largest (var + sqr overflowed: an
infinite gain, so an infinite AdaScale learning rate, and the tuner chose the smallest
batch); a negative statistic given to the tuner (a zero or a sign change in the gain's
denominator: an infinite gain at one batch, which it then chose) is ignored, as a
non-finite one is."""

from __future__ import annotations

import math

import pytest

from danlu.estimate.adapt import BatchLimits, SelfTuner
from danlu.estimate.goodput import GradientStats, efficiency, gain
from danlu.estimate.lr import adascale_lr


def test_the_gain_of_huge_statistics_is_their_ratio() -> None:
    huge, small = GradientStats(1e308, 1e308), GradientStats(1.0, 1.0)
    assert gain(huge, 64, 32) == pytest.approx(gain(small, 64, 32)) == pytest.approx(4 / 3)
    assert efficiency(huge, 64, 32) == pytest.approx(2 / 3)
    assert adascale_lr(0.1, 64, 32, huge) == pytest.approx(0.1 * 4 / 3)
    assert math.isfinite(gain(GradientStats(1.7e308, 1.7e308), 1e300, 1))


def _tuner(stats: tuple[float, float]) -> SelfTuner:
    tuner = SelfTuner(BatchLimits(32, 4096, 1, 256))
    tuner.measure((2,), 32, 0.2, 0.05, stats)
    return tuner


def test_the_tuner_chooses_for_huge_statistics_as_for_their_ratio() -> None:
    assert _tuner((1e308, 1e308)).choose((2,)) == _tuner((1.0, 1.0)).choose((2,))


@pytest.mark.parametrize("stats", [(-1.0, 2.0), (1.0, -0.5), (-0.0001, 1.0)])
def test_negative_statistics_are_ignored(stats: tuple[float, float]) -> None:
    tuner = _tuner((1.0, 0.5))
    before = tuner.choose((2,))
    tuner.measure((2,), 32, 0.2, 0.05, stats)
    assert tuner.state_dict()["stats"] == [1.0, 0.5]
    assert tuner.choose((2,)) == before


def test_negative_statistics_alone_leave_no_choice() -> None:
    # as non-finite ones: nothing to choose by until usable statistics come
    assert _tuner((-1.0, 2.0)).choose((2,)) is None


def test_stored_negative_statistics_are_left_out() -> None:
    tuner = _tuner((1.0, 0.5))
    state = tuner.state_dict()
    fresh = SelfTuner(BatchLimits(32, 4096, 1, 256))
    fresh.load_state_dict({**state, "stats": [-1.0, 2.0]})
    assert fresh.state_dict()["stats"] is None
    fresh.load_state_dict(state)
    assert fresh.choose((2,)) == tuner.choose((2,))


def test_zero_statistics_are_kept() -> None:
    tuner = _tuner((0.0, 0.0))
    assert tuner.state_dict()["stats"] == [0.0, 0.0]
    assert tuner.choose((2,)) is not None
