"""The in-process batch choice (danlu.estimate.adapt.SelfTuner) with bad measurements."""

from __future__ import annotations

import math

import pytest

from danlu.core.errors import ConfigError
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


@pytest.mark.parametrize(
    ("step", "sync"), [(NAN, 0.05), (INF, 0.05), (0.2, NAN), (0.2, INF), (-0.2, 0.0), (0.2, -1.0)]
)
def test_unusable_timings_are_ignored(step: float, sync: float) -> None:
    # a NaN compute or sync time made every goodput NaN: the choice fell to the smallest
    # batch (32 here) until the same micro-batch was measured again
    good, bad = _tuner(), _tuner()
    for tuner in (good, bad):
        tuner.measure((2,), 16, 0.2, 0.05, (1.0, 4.0))
        tuner.measure((2,), 64, 0.5, 0.05, (1.0, 4.0))
    bad.measure((2,), 64, step, sync, (1.0, 4.0))
    assert bad.choose((2,)) == good.choose((2,))
    assert bad.sync_time((2,)) == 0.05
    assert bad.state_dict() == good.state_dict()


def test_unusable_timing_still_records_the_gradient_statistics() -> None:
    tuner = _tuner()
    tuner.measure((2,), 16, NAN, 0.05, (1.0, 4.0))
    assert tuner.state_dict()["stats"] == [1.0, 4.0]


@pytest.mark.parametrize("field", ["init_batch", "max_batch", "min_local", "max_local"])
@pytest.mark.parametrize("value", [2.5, "64", None, True])
def test_batch_limits_must_be_whole_numbers(field: str, value: object) -> None:
    values: dict[str, object] = {"init_batch": 1, "max_batch": 64, "min_local": 1, "max_local": 8}
    values[field] = value
    with pytest.raises(ConfigError, match=field):
        BatchLimits(**values)  # type: ignore[arg-type]


def test_a_checkpoint_with_unusable_timings_restores_the_usable_ones() -> None:
    good = _tuner()
    good.measure((2,), 16, 0.2, 0.05, (1.0, 4.0))
    good.measure((2,), 64, 0.5, 0.05, (1.0, 4.0))
    state = good.state_dict()
    state["compute"].append([32, NAN])
    state["sync"].append([[4], INF])
    restored = _tuner()
    restored.load_state_dict(state)
    assert restored.choose((2,)) == good.choose((2,))
    assert restored.sync_time((4,)) is None
    assert restored.state_dict() == good.state_dict()


@pytest.mark.parametrize("atomic", [0, -4])
def test_a_micro_batch_below_one_sample_is_ignored(atomic: int) -> None:
    # b = 0 became a point of the compute line (x = 0) and moved the choice
    good, bad = _tuner(), _tuner()
    for tuner in (good, bad):
        tuner.measure((2,), 16, 0.2, 0.05, (1.0, 4.0))
        tuner.measure((2,), 64, 0.5, 0.05, (1.0, 4.0))
    bad.measure((2,), atomic, 0.1, 0.05, (1.0, 4.0))
    assert bad.state_dict() == good.state_dict()
    assert bad.choose((2,)) == good.choose((2,))
