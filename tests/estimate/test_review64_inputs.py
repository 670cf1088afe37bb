"""Input validation of the estimate entry points: every bad batch size or count
is a :class:`SpecError` naming the caller's argument, never a NaN result, a NumPy error or a
silently rounded cap.

Choice: counts (nodes, replicas, accumulation steps, batch caps, the initial/base batch the
statistics were measured at) must be whole numbers, as :func:`check_positive_int` demands
(2.5 is refused, not floored: flooring would silently change the cap the caller asked for).
Quantities the formulas treat as continuous (a local batch in the step-time model, a global
batch in gain/efficiency and the LR rules) may be fractional but must be finite.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from danlu.core.errors import SpecError
from danlu.estimate.goodput import (
    GoodputModel,
    GradientStats,
    efficiency,
    gain,
    optimize_goodput,
)
from danlu.estimate.lr import adascale_lr, linear_lr, scale_lr
from danlu.estimate.throughput import ThroughputModel, ThroughputParams

NAN, INF = math.nan, math.inf
NAN_ANY: Any = math.nan  # NaN where the signature says int: the misuse under test


def np_int(value: int) -> Any:
    """A NumPy integer (typed Any: the signatures say ``int``, which NumPy's is not to mypy)."""
    return np.int64(value)


TPUT = ThroughputModel(ThroughputParams(0.01, 0.001, 0.05, 0.001, 0.02, 0.001, 2.0))
STATS = GradientStats(1.0, 4.0)
MODEL = GoodputModel(TPUT, STATS, 32)


def field_of(call: Callable[[], Any]) -> str:
    """The field of the SpecError ``call`` raises (fails the test when it raises nothing)."""
    with pytest.raises(SpecError) as info:
        call()
    return info.value.field


# --- throughput -------------------------------------------------------------------------


@pytest.mark.parametrize("bsz", [NAN, INF, -INF])
def test_step_time_refuses_non_finite_local_bsz(bsz: float) -> None:
    # inf and nan passed `local_bsz <= 0` and came back as a step time of nan
    assert field_of(lambda: TPUT.step_time(bsz, 1, 1)) == "local_bsz"
    assert field_of(lambda: TPUT.throughput(bsz, 1, 1)) == "local_bsz"
    assert field_of(lambda: TPUT.compute_time(bsz)) == "local_bsz"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((8, NAN, 1), "num_nodes"),
        ((8, 1.5, 2), "num_nodes"),
        ((8, 1, NAN), "num_replicas"),
        ((8, 1, INF), "num_replicas"),
        ((8, 1, 2.5), "num_replicas"),
        ((8, 1, 1, NAN), "accum_steps"),
        ((8, 1, 1, 1.5), "accum_steps"),
        ((8, 1, 1, INF), "accum_steps"),
    ],
)
def test_step_time_refuses_non_integer_counts(args: tuple[float, ...], field: str) -> None:
    assert field_of(lambda: TPUT.step_time(*args)) == field  # type: ignore[arg-type]
    assert field_of(lambda: TPUT.throughput(*args)) == field  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "field"),
    [((NAN, 1), "num_nodes"), ((1, NAN), "num_replicas"), ((2, 1), "num_replicas")],
)
def test_sync_time_validates_the_placement(args: tuple[float, float], field: str) -> None:
    assert field_of(lambda: TPUT.sync_time(*args)) == field  # type: ignore[arg-type]


def test_throughput_valid_inputs_unchanged() -> None:
    p = TPUT.params
    # a fractional local batch stays valid: the compute model is linear in b
    assert TPUT.compute_time(32.5) == pytest.approx(p.alpha_c + p.beta_c * 32.5)
    assert TPUT.step_time(32.5, 1, 1) == pytest.approx(TPUT.compute_time(32.5))
    # NumPy integers are integers
    assert TPUT.step_time(8, np_int(2), np_int(4), np_int(2)) == TPUT.step_time(8, 2, 4, 2)
    assert TPUT.sync_time(1, 1) == 0.0


# --- goodput ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [NAN, INF, 2.5, 0, True])
@pytest.mark.parametrize("field", ["max_batch_size", "max_local_bsz", "min_local_bsz"])
def test_optimize_goodput_refuses_bad_caps(field: str, value: Any) -> None:
    # nan raised NumPy's "arange: cannot compute length"; max_local_bsz=2.5 chose 3
    kwargs: dict[str, Any] = {"max_batch_size": 512, "max_local_bsz": 64, field: value}
    assert field_of(lambda: optimize_goodput(MODEL, 1, 2, **kwargs)) == field


@pytest.mark.parametrize(
    ("nodes", "replicas", "field"), [(NAN, 2, "num_nodes"), (1, 2.5, "num_replicas")]
)
def test_optimize_goodput_refuses_bad_placement(nodes: Any, replicas: Any, field: str) -> None:
    caps: dict[str, Any] = {"max_batch_size": 512, "max_local_bsz": 64}
    assert field_of(lambda: optimize_goodput(MODEL, nodes, replicas, **caps)) == field


def test_optimize_goodput_valid_inputs_unchanged() -> None:
    plain = optimize_goodput(MODEL, 1, 2, max_batch_size=512, max_local_bsz=64)
    numpy_caps = optimize_goodput(
        MODEL,
        np_int(1),
        np_int(2),
        max_batch_size=np_int(512),
        max_local_bsz=np_int(64),
    )
    assert plain is not None and plain == numpy_caps
    assert plain.local_bsz <= 64 and plain.global_batch <= 512


@pytest.mark.parametrize("value", [NAN, INF, 2.5, 0.5, 0, True])
def test_goodput_model_refuses_bad_init_batch_size(value: Any) -> None:
    # NaN passed `init_batch_size < 1` and made every efficiency NaN
    assert field_of(lambda: GoodputModel(TPUT, STATS, value)) == "init_batch_size"


@pytest.mark.parametrize("value", [NAN, 2.5, 0])
def test_noise_scale_refuses_bad_init_batch_size(value: Any) -> None:
    assert field_of(lambda: STATS.noise_scale(value)) == "init_batch_size"
    # the check comes first, also when sqr = 0 makes the noise scale infinite
    assert field_of(lambda: GradientStats(0.0, 1.0).noise_scale(value)) == "init_batch_size"


@pytest.mark.parametrize("function", [gain, efficiency])
def test_gain_refuses_fractional_init_batch_size(function: Callable[..., float]) -> None:
    # the message said "positive integer" but 2.5 was accepted
    assert field_of(lambda: function(STATS, 64, 2.5)) == "init_batch_size"


def test_goodput_refuses_non_finite_local_bsz() -> None:
    assert field_of(lambda: MODEL.goodput(NAN_ANY, 1, 1)) == "local_bsz"
    assert field_of(lambda: MODEL.goodput(8, 1, 1, NAN_ANY)) == "accum_steps"


def test_goodput_valid_inputs_unchanged() -> None:
    assert STATS.noise_scale(np_int(32)) == pytest.approx(128)
    assert gain(STATS, 96.5, 32) == pytest.approx(5 / (4 * 32 / 96.5 + 1))  # fractional B ok
    assert GoodputModel(TPUT, STATS, np_int(32)).efficiency(64) == MODEL.efficiency(64)


# --- learning-rate rules ----------------------------------------------------------------


@pytest.mark.parametrize("base", [0.5, 2.5, True])
def test_adascale_names_base_batch_size(base: Any) -> None:
    # 0.5 was reported as `init_batch_size`, a name the caller never used
    assert (
        field_of(lambda: scale_lr("adascale", 0.1, 512, base, grad_stats=STATS))
        == "base_batch_size"
    )
    assert field_of(lambda: adascale_lr(0.1, 512, base, STATS)) == "base_batch_size"


def test_lr_valid_inputs_unchanged() -> None:
    # ratio rules only use B / B0: a fractional base batch stays valid there
    assert linear_lr(0.1, 1.0, 0.5) == pytest.approx(0.2)
    assert adascale_lr(0.1, 512, np_int(128), STATS) == adascale_lr(0.1, 512, 128, STATS)
    assert field_of(lambda: adascale_lr(0.1, 512, NAN_ANY, STATS)) == "base_batch_size"
