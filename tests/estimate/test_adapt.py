"""The in-process batch choice (danlu.estimate.adapt.SelfTuner) with bad measurements."""

from __future__ import annotations

import math

import pytest

from danlu.estimate.adapt import BatchLimits, SelfTuner

NAN, INF = math.nan, math.inf


def _tuner() -> SelfTuner:
    return SelfTuner(BatchLimits(32, 1024, 1, 64))


@pytest.mark.parametrize("stats", [(INF, 1.0), (1.0, NAN), (NAN, NAN), (-INF, 1.0)])
def test_non_finite_gradient_statistics_keep_the_previous_ones(
    stats: tuple[float, float],
) -> None:
    # choose() crashed in round(inf) / round(nan) after such a measurement
    fresh = _tuner()
    fresh.measure((2,), 16, 0.2, 0.05, stats)
    assert fresh.choose((2,)) is None  # no statistics yet: keep the given batch

    good, bad = _tuner(), _tuner()
    good.measure((2,), 16, 0.2, 0.05, (1.0, 4.0))
    bad.measure((2,), 16, 0.2, 0.05, (1.0, 4.0))
    bad.measure((2,), 16, 0.2, 0.05, stats)
    assert bad.choose((2,)) == good.choose((2,)) is not None
    assert bad.state_dict() == good.state_dict()


def test_a_checkpoint_with_non_finite_statistics_loads_without_them() -> None:
    tuner = _tuner()
    tuner.measure((2,), 16, 0.2, 0.05, (1.0, 4.0))
    state = tuner.state_dict()
    restored = _tuner()
    restored.load_state_dict({**state, "stats": [INF, 1.0]})
    assert restored.choose((2,)) is None
    restored.load_state_dict(state)
    assert restored.choose((2,)) == tuner.choose((2,))


def test_the_cache_key_of_any_float_is_defined() -> None:
    from danlu.estimate.adapt import _rounded

    assert _rounded(1.0) == 0.0 and _rounded(1.02**10) == 10.0
    assert [_rounded(v) for v in (0.0, -1.0, -INF)] == [0.0, 0.0, 0.0]
    assert _rounded(INF) == INF and _rounded(NAN) == -1.0
