"""Edge values of the estimate package: plan_accumulation's global batch is bounded by the
spec's MAX_BATCH (exact=True on 10**30 never returned); ThroughputParams' gamma is kept
in the fit's [1, 10] (2000 gave infinite step times); a compute time far below the sync
time (a denormal one too) gives the finite step time it should, not inf or NaN."""

from __future__ import annotations

import math

import numpy as np
import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import MAX_BATCH
from danlu.estimate.optimize import plan_accumulation
from danlu.estimate.throughput import ThroughputModel, ThroughputParams

_BASE = {"alpha_c": 0.01, "beta_c": 0.001, "alpha_n": 0.05, "beta_n": 0.001, "alpha_r": 0.02}


@pytest.mark.parametrize(
    ("batch", "exact"),
    # exact=True on 10**30 never returned on the old code: 2**31 checks the same bound there
    [(MAX_BATCH + 1, True), (2**31, True), (MAX_BATCH + 1, False), (10**30, False)],
    ids=["2**30+1-exact", "2**31-exact", "2**30+1", "10**30"],
)
def test_a_global_batch_beyond_max_batch_is_refused(batch: int, exact: bool) -> None:
    with pytest.raises(SpecError) as info:
        plan_accumulation(batch, 1, 8, exact=exact)
    assert info.value.field == "global_batch"
    assert "1,073,741,824" in str(info.value)


def test_exact_plans_up_to_max_batch_are_as_before() -> None:
    assert plan_accumulation(MAX_BATCH, 1, 1, exact=True).accum_steps == MAX_BATCH
    plan = plan_accumulation(MAX_BATCH - 1, 3, 7, exact=True)
    assert (plan.micro_batch, plan.accum_steps, plan.global_batch) == (7, 51130563, MAX_BATCH - 1)
    assert plan_accumulation(96, 4, 16).global_batch == 96


@pytest.mark.parametrize("gamma", [10.5, 2000.0, 1e300])
def test_gamma_above_ten_is_refused(gamma: float) -> None:
    with pytest.raises(SpecError) as info:
        ThroughputParams(**_BASE, beta_r=0.001, gamma=gamma)
    assert info.value.field == "gamma"
    assert "1..10" in str(info.value)


def test_gamma_ten_is_kept() -> None:
    model = ThroughputModel(ThroughputParams(**_BASE, beta_r=0.001, gamma=10.0))
    assert math.isfinite(model.step_time(64, 2, 8))


def test_a_tiny_compute_time_gives_the_sync_time() -> None:
    # (c^g + s^g)^(1/g) with c = 1e-300, s = 1: 1, not inf (s/c overflowed)
    model = ThroughputModel(ThroughputParams(1e-300, 0.0, 1.0, 0.0, 1.0, 0.0, 2.0))
    assert model.step_time(1, 1, 2) == pytest.approx(1.0)
    assert model.step_time(1, 2, 4, accum_steps=3) == pytest.approx(1.0)
    assert model.step_times([1.0, 1.0], [1, 2], [2, 2]) == pytest.approx([1.0, 1.0])


def test_a_compute_time_gone_to_zero_is_not_nan() -> None:
    # alpha_c = 0 and beta_c * 5e-324 underflows to 0: the step is the sync alone, and on one
    # replica throughput names the local batch instead of dividing by zero
    model = ThroughputModel(ThroughputParams(0.0, 0.001, 1.0, 0.0, 1.0, 0.0, 2.0))
    assert model.step_time(5e-324, 1, 2) == pytest.approx(1.0)
    assert model.step_time(5e-324, 1, 1) == 0.0
    assert not np.isnan(model.step_times([5e-324], [1], [1])).any()
    with pytest.raises(SpecError) as info:
        model.throughput(5e-324, 1, 1)
    assert info.value.field == "local_bsz"


def test_ordinary_step_times_are_unchanged() -> None:
    params = ThroughputParams(**_BASE, beta_r=0.001, gamma=2.5)
    model = ThroughputModel(params)
    compute = 0.01 + 0.001 * 32
    sync = 0.05 + 0.001 * 6
    expected = compute * (1 + (sync / compute) ** 2.5) ** (1 / 2.5)
    assert model.step_time(32, 2, 8) == pytest.approx(expected, rel=1e-12)
