"""Absurd sizes given to the estimators are named errors with their bound, not bare
OverflowErrors; the throughput fit does not depend on the unit of time."""

from __future__ import annotations

import math
from typing import Any

import pytest

from danlu.core.errors import DataError, SpecError, UnknownNameError
from danlu.core.spec import MAX_BATCH
from danlu.estimate.adapt import BatchLimits, SelfTuner
from danlu.estimate.goodput import GoodputModel, GradientStats, optimize_goodput
from danlu.estimate.memory.analytic import (
    TransformerConfig,
    activation_bytes_per_layer,
    transformer_memory,
)
from danlu.estimate.memory.fit import EnvelopeFit, fit_piecewise_linear, fit_two_phase
from danlu.estimate.memory.gpus import get_gpu
from danlu.estimate.optimize import best_batch, fastest_batch
from danlu.estimate.throughput import (
    StepMeasurement,
    ThroughputModel,
    ThroughputParams,
    fit_throughput,
    mape,
)

GPT2 = TransformerConfig(12, 768, 12, 1024, 50257)
_THROUGHPUT = ThroughputModel(ThroughputParams(0.01, 0.001, 0.05, 0.001, 0.02, 0.001, 2.0))


@pytest.mark.parametrize("batch", [10**400, 10**300, MAX_BATCH + 1])
def test_transformer_predict_refuses_a_batch_beyond_the_largest(batch: int) -> None:
    memory = transformer_memory(GPT2)
    # 10**400 raised a bare OverflowError; 10**300 answered a 300-digit number of bytes
    with pytest.raises(SpecError, match=r"batch_size: must lie within 1\.\.1,073,741,824"):
        memory.predict(batch)
    with pytest.raises(SpecError, match="batch_size"):
        memory.activation_bytes(batch)
    assert memory.predict(MAX_BATCH) > memory.predict(1)


def test_transformer_activation_bytes_refuses_a_batch_that_is_no_number() -> None:
    memory = transformer_memory(GPT2)
    with pytest.raises(SpecError, match="batch_size"):
        memory.activation_bytes(None)  # type: ignore[arg-type]  # a bare TypeError
    with pytest.raises(SpecError, match="batch_size"):
        activation_bytes_per_layer(GPT2, 10**400)


def test_transformer_max_batch_stops_at_the_largest_batch() -> None:
    memory = transformer_memory(GPT2)
    assert memory.max_batch(1e308) == MAX_BATCH  # everything it takes fits
    assert memory.max_batch(10**30) == MAX_BATCH
    b = memory.max_batch(80 << 30)
    assert b is not None and memory.predict(b) <= 80 << 30 < memory.predict(b + 1)


@pytest.mark.parametrize("field", ["layers", "hidden", "seq", "vocab"])
def test_transformer_config_refuses_sizes_beyond_its_bound(field: str) -> None:
    sizes = {"layers": 12, "hidden": 768, "heads": 12, "seq": 1024, "vocab": 50257}
    sizes[field] = 10**400  # an OverflowError in transformer_memory's divisions
    with pytest.raises(
        SpecError, match=rf"{field}: must lie within 1\.\.4,611,686,018,427,387,904"
    ):
        TransformerConfig(**sizes)


def test_transformer_config_at_its_bounds_is_answered() -> None:
    top = 2**62
    memory = transformer_memory(TransformerConfig(top, top, top, top, top), fragmentation=100.0)
    assert memory.predict(MAX_BATCH) > 0
    assert memory.max_batch(1e308) == MAX_BATCH


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"tensor_parallel": 10**400}, "tensor_parallel"),  # a bare OverflowError
        ({"data_parallel": 10**400, "zero_stage": 3}, "data_parallel"),
        ({"fragmentation": 1e308}, "fragmentation"),  # predict: int(inf), an OverflowError
        ({"fragmentation": 101.0}, "fragmentation"),
    ],
)
def test_transformer_memory_refuses_absurd_options(options: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        transformer_memory(GPT2, **options)
    assert transformer_memory(GPT2, fragmentation=100.0).predict(1) > 0


@pytest.mark.parametrize("batch", [math.nan, "3", None])
def test_piecewise_fit_refuses_a_batch_that_is_not_whole(batch: Any) -> None:
    fit = fit_piecewise_linear({1: 100, 2: 200})
    with pytest.raises(SpecError, match="batch_size"):  # bare ValueError and TypeError
        fit(batch)
    assert fit(3) == 300


def test_fits_refuse_a_traced_batch_beyond_the_largest() -> None:
    with pytest.raises(DataError, match="beyond the largest batch"):
        fit_piecewise_linear({1: 100, 10**400: 200})  # a bare OverflowError
    with pytest.raises(DataError, match="beyond the largest batch"):
        fit_two_phase({1: 100, 10**400: 200}, {1: 50, 10**400: 60})
    with pytest.raises(DataError, match="beyond the largest batch"):
        EnvelopeFit({1: [100, 50], 10**400: [200, 60]})


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"tolerance": "0.01"}, "tolerance"),  # a bare TypeError at the first prediction
        ({"tolerance": -(10**400)}, "tolerance"),  # a bare OverflowError
        ({"tolerance": math.nan}, "tolerance"),  # refused nothing
        ({"max_extrapolation": None}, "max_extrapolation"),
        ({"max_extrapolation": 0}, "max_extrapolation"),
    ],
)
def test_fits_refuse_limits_that_are_not_numbers(options: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        fit_piecewise_linear({1: 100, 2: 200}, **options)
    with pytest.raises(SpecError, match=field):
        EnvelopeFit({1: [100, 50], 2: [200, 60]}, **options)


def test_batch_caps_beyond_64_bits_are_refused() -> None:
    with pytest.raises(
        SpecError, match=r"max_local_bsz: must lie within 1\.\.4,611,686,018,427,387,904"
    ):
        fastest_batch(_THROUGHPUT, 1, 2, 10**400)  # a bare OverflowError
    with pytest.raises(SpecError, match="max_local_bsz"):
        best_batch(lambda b: float(b), 10**30)  # counted to 10**30: never returned
    model = GoodputModel(_THROUGHPUT, GradientStats(1.0, 2.0), 32)
    with pytest.raises(SpecError, match="max_local_bsz"):  # a C long overflow
        optimize_goodput(model, 1, 2, max_batch_size=1024, max_local_bsz=10**30)
    assert fastest_batch(_THROUGHPUT, 1, 2, 2**62) is not None


def test_step_time_refuses_accumulation_beyond_64_bits() -> None:
    with pytest.raises(SpecError, match="accum_steps: must lie within"):
        _THROUGHPUT.step_time(32, 1, 2, 10**400)  # a bare OverflowError
    model = GoodputModel(_THROUGHPUT, GradientStats(1.0, 2.0), 32)
    with pytest.raises(SpecError, match="accum_steps"):
        model.goodput(32, 1, 2, 10**400)


def test_fit_and_mape_refuse_rows_that_are_no_measurements() -> None:
    with pytest.raises(SpecError, match="rows"):  # a bare AttributeError
        fit_throughput([(1, 1, 32, 0.5, 0.0)])  # type: ignore[list-item]
    with pytest.raises(SpecError, match="rows"):
        mape(_THROUGHPUT, ["1,1,32,0.5,0"])  # type: ignore[list-item]


def test_get_gpu_refuses_a_name_that_is_not_text() -> None:
    with pytest.raises(UnknownNameError, match="GPU type"):
        get_gpu(None)  # type: ignore[arg-type]  # a bare AttributeError on .lower()


def test_self_tuner_ignores_measurements_that_are_no_numbers() -> None:
    tuner = SelfTuner(BatchLimits(32, 1024, 1, 64))
    for atomic, step, sync in [
        (16, 10**400, 0.1),  # OverflowError in math.isfinite
        (16, "0.5", 0.1),  # TypeError
        (10**400, 0.5, 0.1),  # OverflowError in the line fit
        (math.inf, 0.5, 0.1),
        (None, 0.5, 0.1),
    ]:
        tuner.measure((2,), atomic, step, sync, (math.nan, 1.0))  # type: ignore[arg-type]
    for stats in [(10**400, 1.0), (1.0, None), ("1", 2.0)]:  # OverflowError, TypeError
        tuner.measure((2,), 0, 0.5, 0.1, stats)  # type: ignore[arg-type]
    assert tuner.state_dict() == {"compute": [], "sync": [], "stats": None}
    tuner.measure((2,), 16, 0.5, 0.1, (1.0, 2.0))
    tuner.measure((2,), 32, 0.8, 0.1, (1.0, 2.0))
    assert tuner.choose((2,)) is not None


def _rows(scale: float) -> list[StepMeasurement]:
    """Step times of a known model (gamma 2), every time times ``scale``."""
    out = []
    for nodes, replicas in ((1, 1), (1, 2), (1, 4), (2, 4), (2, 8)):
        for b in (16, 32, 64):
            compute = 0.01 + 0.001 * b
            extra = max(replicas - 2, 0)
            sync = 0.0 if replicas == 1 else (0.02 if nodes == 1 else 0.05) + 0.002 * extra
            step = math.hypot(compute, sync)
            out.append(StepMeasurement(nodes, replicas, b, step * scale, (step - compute) * scale))
    return out


@pytest.mark.parametrize("scale", [1e-6, 1e-9, 1e3])
def test_throughput_fit_does_not_depend_on_the_unit_of_time(scale: float) -> None:
    # the time parameters' fixed floor of 1e-8 s was above a whole step timed in
    # microseconds: the fit came back 500% (at 1e-9: 600,000%) off without a word
    rows = _rows(scale)
    model = fit_throughput(rows)
    assert mape(model, rows) < 0.01
    reference = fit_throughput(_rows(1.0)).params.as_array()
    got = model.params.as_array()
    assert got[:6] / scale == pytest.approx(reference[:6], rel=1e-4)
    assert got[6] == pytest.approx(reference[6], rel=1e-4)


def test_throughput_fit_of_equal_step_times_is_flat_in_the_batch() -> None:
    # equal times at every batch: a compute time flat in b (beta_c held at 1e-8 s per
    # sample it grew by 0.1 ms per 10,000 samples, 186% off on steps of 0.1 ms)
    rows = [StepMeasurement(1, 1, b, 1e-4, 0.0) for b in (1, 10, 100, 1000, 10000, 100000)]
    model = fit_throughput(rows)
    assert mape(model, rows) < 0.01
    assert model.step_time(100000, 1, 1) == pytest.approx(1e-4, rel=1e-3)


def test_throughput_fit_of_one_row_is_exact() -> None:
    for row in (StepMeasurement(1, 1, 32, 1e-10, 0.0), StepMeasurement(2, 8, 32, 0.5, 0.3)):
        model = fit_throughput([row])
        assert mape(model, [row]) < 1e-6
        assert model.params.alpha_c == pytest.approx(row.compute_time / 2)
