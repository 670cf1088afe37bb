"""Bad inputs to the memory models, the step-time model, the measurement loaders and the
training-time formula: named errors, not bare exceptions or silently wrong answers."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from danlu.core.errors import DataError, SpecError
from danlu.estimate.goodput import GoodputModel, GradientStats, efficiency, gain
from danlu.estimate.memory.analytic import TransformerConfig, transformer_memory
from danlu.estimate.memory.fit import EnvelopeFit, fit_piecewise_linear, fit_two_phase
from danlu.estimate.memory.gpus import get_gpu
from danlu.estimate.memory.predict import FittedMemoryModel, MemoryEstimate
from danlu.estimate.optimize import cost_optimal_gpu_count, largest_safe_batch, training_time
from danlu.estimate.throughput import (
    StepMeasurement,
    ThroughputModel,
    ThroughputParams,
    load_placements,
    load_scalability,
)

_THROUGHPUT = ThroughputModel(ThroughputParams(0.01, 0.001, 0.05, 0.001, 0.02, 0.001, 2.0))


def _fitted() -> FittedMemoryModel:
    """M(b) = 1 GiB + b/8 GiB (reserved: plus the cuBLAS workspaces), traced at 1, 2, 4."""
    gpu = get_gpu("h100")
    fixed = gpu.cublas_workspace_bytes * gpu.cublas_handles
    gib = 1 << 30
    ests = [
        MemoryEstimate(
            b, "h100", gib + b * gib // 8, gib + b * gib // 8, fixed + gib + b * gib // 8,
            100, fixed + gib + b * gib // 8 + 100, 10**12, True, {}, 0,
        )
        for b in (1, 2, 4)
    ]  # fmt: skip
    return FittedMemoryModel(ests, gpu)


@pytest.mark.parametrize(
    ("limit", "margin", "field"),
    [
        (math.nan, 0, "limit_bytes"),  # answered the search's cap, 128
        (math.inf, 0, "limit_bytes"),
        (10**400, 0, "limit_bytes"),
        ("80e9", 0, "limit_bytes"),  # a bare TypeError
        (True, 0, "limit_bytes"),
        (-1, 0, "limit_bytes"),
        (80 << 30, math.nan, "margin_bytes"),  # answered the cap too
        (80 << 30, -5, "margin_bytes"),
    ],
)
def test_fitted_max_batch_refuses_a_budget_that_is_not_bytes(
    limit: Any, margin: Any, field: str
) -> None:
    model = _fitted()
    with pytest.raises(SpecError, match=field):
        model.max_batch(limit, margin)
    assert model.max_batch(model.predict(40)) == 40  # a real budget: answered as before


@pytest.mark.parametrize("batch", [2.5, math.nan, True, "3", None])
def test_fitted_predict_refuses_a_batch_that_is_not_whole(batch: Any) -> None:
    model = _fitted()
    for predict in (model.predict, model.predict_logical, model.predict_reserved):
        with pytest.raises(SpecError, match="batch_size"):
            predict(batch)
    assert model.predict(16) == model.predict_reserved(16) + model.gpu.context_bytes


@pytest.mark.parametrize("batch", [2.5, math.nan, True, 0, -3, "8"])
def test_transformer_predict_refuses_a_batch_that_is_not_a_positive_int(batch: Any) -> None:
    memory = transformer_memory(TransformerConfig(12, 768, 12, 1024, 50257))
    with pytest.raises(SpecError, match="batch_size"):
        memory.predict(batch)
    assert memory.predict(2) - memory.predict(1) == memory.activation_bytes_per_sample


@pytest.mark.parametrize("batch", ["32", None, True, 10**400])
def test_step_time_refuses_a_local_batch_that_is_not_a_number(batch: Any) -> None:
    model = _THROUGHPUT
    for call in (
        lambda: model.compute_time(batch),
        lambda: model.step_time(batch, 1, 2),
        lambda: model.throughput(batch, 1, 2),
    ):
        with pytest.raises(SpecError, match="local_bsz"):
            call()
    assert model.compute_time(2.5) == pytest.approx(0.0125)  # fractional batches stay valid


def test_a_row_with_more_values_than_the_header_is_refused(tmp_path: Path) -> None:
    placements = tmp_path / "placements.csv"
    placements.write_text(
        "placement,local_bsz,step_time,sync_time\n1,32,0.5,0.0\n12,32,0.9,0.2,7\n",
        encoding="utf-8",
    )
    with pytest.raises(DataError, match=r"placements\.csv:3: 1 value\(s\) more than"):
        load_placements(placements)
    scalability = tmp_path / "scalability.csv"
    scalability.write_text(
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n1,1,32,0.5,0.0,,\n",
        encoding="utf-8",
    )
    with pytest.raises(DataError, match=r"scalability\.csv:2: 2 value\(s\) more than"):
        load_scalability(scalability)


def test_training_time_refuses_more_gpus_than_a_job_may_have() -> None:
    with pytest.raises(SpecError, match="num_gpus"):
        training_time(3600.0, 10**400, 0.5)  # a bare OverflowError
    assert training_time(3600.0, 4, 0.5) == 1800.0


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ({1: 1000, 1.5: 1200}, "traced batch size 1.5"),  # ZeroDivisionError: two points at b=1
        ({True: 1000, 2: 1500}, "traced batch size True"),
        ({1: 1000, 2: math.nan}, "b=2 peaks at nan"),  # a bare ValueError
        ({1: 1000, 2: math.inf}, "b=2 peaks at inf"),  # a bare OverflowError
        ({1: 1000, 2: 10**400}, "b=2 peaks at"),  # OverflowError in the division
        ({1: 1000, 2: "2000"}, "b=2 peaks at '2000'"),  # read as 2000 bytes
    ],
)
def test_the_fits_refuse_points_that_are_not_traces(points: dict[Any, Any], message: str) -> None:
    with pytest.raises(DataError, match=re.escape(message)):
        fit_piecewise_linear(points)
    optimizer = dict.fromkeys(points, 500)
    with pytest.raises(DataError, match=re.escape(message)):
        fit_two_phase(points, optimizer)
    assert fit_piecewise_linear({1: 1100, 2: 1200, 4: 1400.0})(8) == 1800  # float bytes: fine


def test_the_envelope_fit_refuses_a_fractional_batch() -> None:
    # the curve of b = 1.5 was looked up as the curve of b = 1
    with pytest.raises(DataError, match=r"traced batch size 1\.5"):
        EnvelopeFit({1: [100, 1100], 1.5: [100, 1150]})
    assert EnvelopeFit({1: [100, 1100], 2: [100, 1200]}).slope == pytest.approx(100)


def test_an_initial_batch_beyond_float_range_is_refused() -> None:
    stats = GradientStats(1.0, 1.0)
    for call in (
        lambda: gain(stats, 64, 10**400),  # a bare OverflowError
        lambda: efficiency(stats, 64, 10**400),
        lambda: stats.noise_scale(10**400),
        lambda: GoodputModel(_THROUGHPUT, stats, 10**400),
    ):
        with pytest.raises(SpecError, match="init_batch_size"):
            call()
    assert gain(stats, 64, 32) == pytest.approx(4 / 3)
    assert stats.noise_scale(2**62) == 2.0**62


def test_numbers_beyond_float_range_are_named_not_overflow_errors() -> None:
    # each raised a bare OverflowError in math.isfinite / math.isnan
    with pytest.raises(SpecError, match="step_time"):
        StepMeasurement(1, 1, 32, 10**400, 0.0)
    with pytest.raises(SpecError, match="sync_time"):
        StepMeasurement(1, 1, 32, 1.0, -(10**400))
    memory = transformer_memory(TransformerConfig(12, 768, 12, 1024, 50257))
    with pytest.raises(SpecError, match="spare"):
        largest_safe_batch(memory, 80 << 30, spare=10**400)
    # a deadline beyond float range is no bound at all, as inf is
    choice = cost_optimal_gpu_count(
        [1, 2], lambda k: 10.0 / k, lambda k: 1.0 * k, deadline_s=10**400
    )
    assert choice == cost_optimal_gpu_count([1, 2], lambda k: 10.0 / k, lambda k: 1.0 * k)
