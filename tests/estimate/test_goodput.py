"""Tests of statistical efficiency, goodput and the goodput optimiser (danlu.estimate.goodput)."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.errors import SpecError
from danlu.estimate.goodput import (
    GoodputModel,
    GradientStats,
    efficiency,
    gain,
    optimize_goodput,
)
from danlu.estimate.throughput import (
    ThroughputModel,
    ThroughputParams,
    fit_throughput,
    load_placements,
)

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pollux" / "traces"

PARAMS = ThroughputParams(
    alpha_c=0.02, beta_c=0.001, alpha_n=0.12, beta_n=0.004, alpha_r=0.03, beta_r=0.002, gamma=2.5
)
TPUT = ThroughputModel(PARAMS)

stats_strategy = st.builds(
    GradientStats,
    sqr=st.floats(0.0, 1e3, allow_nan=False),
    var=st.floats(0.0, 1e3, allow_nan=False),
)


@dataclass(frozen=True)
class LinearMemory:
    """M(b) = fixed + per_sample * b, a stand-in for the memory model."""

    fixed: int
    per_sample: int

    def predict(self, batch_size: int) -> int:
        return self.fixed + self.per_sample * batch_size

    def max_batch(self, limit_bytes: int, margin_bytes: int = 0) -> int | None:
        b = (limit_bytes - margin_bytes - self.fixed) // self.per_sample
        return b if b >= 1 else None


# --- gain and efficiency ----------------------------------------------------------------


def test_gain_and_efficiency_by_hand() -> None:
    s = GradientStats(sqr=1.0, var=3.0)
    # scale 4: (3 + 1) / (3/4 + 1) = 16/7
    assert gain(s, 512, 128) == pytest.approx(16 / 7)
    assert efficiency(s, 512, 128) == pytest.approx(16 / 7 / 4)
    # McCandlish form: (B_noise + B0) / (B_noise + B), B_noise = B0 * var / sqr = 384
    assert s.noise_scale(128) == pytest.approx(384)
    assert efficiency(s, 512, 128) == pytest.approx((384 + 128) / (384 + 512))
    assert gain(s, 128, 128) == pytest.approx(1.0)


def test_gain_limits() -> None:
    assert gain(GradientStats(sqr=1.0, var=0.0), 1024, 128) == pytest.approx(1.0)  # no noise
    assert gain(GradientStats(sqr=0.0, var=1.0), 1024, 128) == pytest.approx(8.0)  # all noise
    assert gain(GradientStats(sqr=0.0, var=0.0), 1024, 128) == 1.0
    assert math.isinf(GradientStats(sqr=0.0, var=1.0).noise_scale(32))


@settings(max_examples=100, deadline=None)
@given(stats=stats_strategy, b0=st.integers(1, 512), k=st.floats(1.0, 64.0))
def test_gain_between_one_and_scale(stats: GradientStats, b0: int, k: float) -> None:
    batch = b0 * k
    g = gain(stats, batch, b0)
    assert 1.0 - 1e-9 <= g <= k * (1 + 1e-9)
    e = efficiency(stats, batch, b0)
    assert 0.0 < e <= 1.0 + 1e-9
    assert efficiency(stats, batch * 2, b0) <= e * (1 + 1e-9)  # never rises with the batch


@pytest.mark.parametrize(("sqr", "var"), [(-1.0, 1.0), (1.0, float("nan")), (float("inf"), 1.0)])
def test_gradient_stats_validation(sqr: float, var: float) -> None:
    with pytest.raises(SpecError, match="grad_stats"):
        GradientStats(sqr=sqr, var=var)


def test_invalid_batches_are_spec_errors() -> None:
    s = GradientStats(1.0, 1.0)
    with pytest.raises(SpecError, match="init_batch_size"):
        gain(s, 64, 0)
    with pytest.raises(SpecError, match="batch_size"):
        efficiency(s, 0, 32)
    with pytest.raises(SpecError, match="init_batch_size"):
        GoodputModel(TPUT, s, 0)


@pytest.mark.parametrize("batch", [math.nan, math.inf, -math.inf])
def test_non_finite_batches_are_spec_errors(batch: float) -> None:
    # NaN passed the <= 0 check: gain(nan) came back as 1.0, efficiency(inf) as 0
    s = GradientStats(1.0, 4.0)
    for function in (gain, efficiency):
        with pytest.raises(SpecError) as info:
            function(s, batch, 32)
        assert info.value.field == "batch_size" and "finite" in info.value.message
        with pytest.raises(SpecError) as info:
            function(s, 64, batch)  # type: ignore[arg-type]
        assert info.value.field == "init_batch_size"


def test_goodput_is_throughput_times_efficiency() -> None:
    model = GoodputModel(TPUT, GradientStats(sqr=1.0, var=2.0), init_batch_size=64)
    expected = TPUT.throughput(32, 2, 4, 2) * model.efficiency(4 * 32 * 2)
    assert model.goodput(32, 2, 4, 2) == pytest.approx(expected)


# --- the optimiser ----------------------------------------------------------------------


def brute_force(
    model: GoodputModel, nodes: int, replicas: int, max_batch: int, cap: int, accum: bool
) -> float:
    best = 0.0
    for s in range(1, (max_batch // replicas) + 1 if accum else 2):
        for b in range(1, cap + 1):
            g = replicas * b * s
            if g > max_batch or g < model.init_batch_size:
                continue
            best = max(best, model.goodput(b, nodes, replicas, s))
    return best


@pytest.mark.parametrize("accum", [True, False])
@pytest.mark.parametrize(("sqr", "var"), [(1.0, 0.1), (1.0, 5.0), (0.01, 10.0)])
@pytest.mark.parametrize(("nodes", "replicas"), [(1, 1), (1, 4), (2, 8)])
def test_optimizer_matches_brute_force(
    accum: bool, sqr: float, var: float, nodes: int, replicas: int
) -> None:
    model = GoodputModel(TPUT, GradientStats(sqr, var), init_batch_size=16)
    choice = optimize_goodput(
        model, nodes, replicas, max_batch_size=256, max_local_bsz=24, accumulation=accum
    )
    assert choice is not None
    assert choice.local_bsz <= 24
    assert choice.global_batch == replicas * choice.local_bsz * choice.accum_steps <= 256
    assert choice.global_batch >= 16
    if not accum:
        assert choice.accum_steps == 1
    assert choice.goodput == pytest.approx(
        model.goodput(choice.local_bsz, nodes, replicas, choice.accum_steps)
    )
    # the search restricts itself to the fewest micro-batches per total: within 1% of all pairs
    assert choice.goodput >= 0.99 * brute_force(model, nodes, replicas, 256, 24, accum)


def test_noisier_gradients_choose_larger_batches() -> None:
    quiet = GoodputModel(TPUT, GradientStats(sqr=1.0, var=0.05), init_batch_size=32)
    noisy = GoodputModel(TPUT, GradientStats(sqr=1.0, var=50.0), init_batch_size=32)
    a = optimize_goodput(quiet, 2, 8, max_batch_size=4096, max_local_bsz=128)
    b = optimize_goodput(noisy, 2, 8, max_batch_size=4096, max_local_bsz=128)
    assert a is not None and b is not None
    assert b.global_batch > 2 * a.global_batch
    assert b.accum_steps >= 1 and b.local_bsz <= 128


@settings(max_examples=60, deadline=None)
@given(
    stats=stats_strategy,
    fixed=st.integers(0, 2_000),
    per_sample=st.integers(1, 200),
    limit=st.integers(1, 20_000),
    margin=st.integers(0, 1_000),
    replicas=st.integers(1, 8),
)
def test_optimizer_respects_the_memory_limit(
    stats: GradientStats, fixed: int, per_sample: int, limit: int, margin: int, replicas: int
) -> None:
    memory = LinearMemory(fixed, per_sample)
    model = GoodputModel(TPUT, stats, init_batch_size=8)
    choice = optimize_goodput(
        model,
        1,
        replicas,
        max_batch_size=1024,
        max_local_bsz=512,
        memory=memory,
        limit_bytes=limit,
        margin_bytes=margin,
    )
    fits = memory.max_batch(limit, margin)
    if fits is None:
        assert choice is None
        return
    assert choice is not None
    assert memory.predict(choice.local_bsz) <= limit - margin
    assert choice.global_batch <= 1024


def test_infeasible_configurations_return_none() -> None:
    model = GoodputModel(TPUT, GradientStats(1.0, 1.0), init_batch_size=8)
    # 8 replicas x at least 4 samples cannot stay under a global batch of 16
    assert (
        optimize_goodput(model, 2, 8, max_batch_size=16, max_local_bsz=8, min_local_bsz=4) is None
    )
    # memory too small for a single sample
    tiny = LinearMemory(fixed=1000, per_sample=10)
    assert (
        optimize_goodput(
            model, 1, 1, max_batch_size=64, max_local_bsz=8, memory=tiny, limit_bytes=1005
        )
        is None
    )
    with pytest.raises(SpecError, match="limit_bytes"):
        optimize_goodput(model, 1, 1, max_batch_size=64, max_local_bsz=8, memory=tiny)
    with pytest.raises(SpecError, match="num_replicas"):
        optimize_goodput(model, 2, 1, max_batch_size=64, max_local_bsz=8)


def test_max_batch_below_initial_batch_takes_the_largest_allowed() -> None:
    model = GoodputModel(TPUT, GradientStats(1.0, 1.0), init_batch_size=256)
    choice = optimize_goodput(model, 1, 4, max_batch_size=64, max_local_bsz=8)
    assert choice is not None and choice.global_batch == 64 and choice.local_bsz == 8


@pytest.mark.skipif(not TRACES.is_dir(), reason="Pollux traces not present")
def test_real_trace_batch_grows_as_training_progresses() -> None:
    """cifar10: the gradient noise scale grows during training, so does the best batch."""
    model = fit_throughput(load_placements(TRACES / "cifar10" / "placements.csv"))
    with (TRACES / "cifar10" / "validation-128.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    chosen = []
    for row in (rows[0], rows[len(rows) // 2], rows[-1]):
        stats = GradientStats(float(row["grad_sqr"]), float(row["grad_var"]))
        choice = optimize_goodput(
            GoodputModel(model, stats, 128), 4, 16, max_batch_size=4096, max_local_bsz=256
        )
        assert choice is not None
        chosen.append(choice.global_batch)
    assert chosen[0] < chosen[1] < chosen[2]
