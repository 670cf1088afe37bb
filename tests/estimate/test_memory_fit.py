"""Fitted M(b) = max(C_step, C0 + a*b) and its refusals."""

from __future__ import annotations

import pytest

from danlu.estimate.memory.fit import ExtrapolationError, fit_piecewise_linear
from danlu.estimate.memory.gpus import get_gpu
from danlu.estimate.memory.predict import FittedMemoryModel, MemoryEstimate


def test_linear_points_extrapolate_exactly() -> None:
    fit = fit_piecewise_linear({1: 1100, 2: 1200, 4: 1400})
    assert fit.slope == pytest.approx(100)
    assert fit(32) == 4200
    assert fit(4) == 1400


def test_flat_prefix_then_linear() -> None:
    fit = fit_piecewise_linear({1: 5000, 2: 5000, 8: 6000, 16: 8000})
    assert fit.c_step == 5000
    assert fit(32) == 12000
    assert fit(3) == 5000


def test_refuses_when_slope_unknown() -> None:
    fit = fit_piecewise_linear({1: 5000, 2: 5000, 4: 5200})
    with pytest.raises(ExtrapolationError, match="growth with b is unknown"):
        fit(32)


def test_refuses_far_extrapolation_and_bad_fits() -> None:
    fit = fit_piecewise_linear({1: 1100, 2: 1200, 4: 1400})
    with pytest.raises(ExtrapolationError, match="more than 32x"):
        fit(129)
    bent = fit_piecewise_linear({1: 1000, 2: 2000, 4: 2100, 8: 9000})
    assert bent.residual > 0.01
    with pytest.raises(ExtrapolationError, match="not piecewise linear"):
        bent(16)


def _est(b: int, logical: int, reserved: int) -> MemoryEstimate:
    return MemoryEstimate(b, "h100", logical, logical, reserved, 100, reserved + 100, 10**12,
                          True, {}, 0)


def test_fitted_model_protocol_and_max_batch() -> None:
    gpu = get_gpu("h100")
    fixed = gpu.cublas_workspace_bytes * gpu.cublas_handles
    gib = 1 << 30
    ests = [_est(b, gib + b * gib // 8, fixed + gib + b * gib // 8) for b in (1, 2, 4)]
    model = FittedMemoryModel(ests, gpu)
    assert model.predict(16) == fixed + gib + 2 * gib + gpu.context_bytes
    limit = model.predict(40)
    assert model.max_batch(limit) == 40
    assert model.max_batch(limit, margin_bytes=gib // 8) == 39
    assert model.max_batch(100) is None
