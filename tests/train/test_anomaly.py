"""The spike statistics of :class:`~danlu.train.anomaly.AnomalyDetector`: the limit
``mu + k * sigma`` is a function of the window's values alone (not of the values that left
it), and a window too short for its ``min_history`` is refused, not silently off."""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError


def _exact_limit(values: list[float], k: float) -> float:
    """``mu + k * sigma`` (population deviation) of ``values``, from exact sums."""
    exact = [Fraction(v) for v in values]
    n = len(exact)
    mu = sum(exact) / n
    var = sum((v - mu) ** 2 for v in exact) / n
    return float(mu) + k * float(var) ** 0.5


@pytest.mark.parametrize("start", [1e6, 1e8])
def test_the_spike_limit_depends_only_on_the_window_after_a_large_early_loss(
    start: float,
) -> None:
    """A loss decaying from ``start`` to 1e-2 over 2000 steps, then flat (+-5 % noise). The
    window kept running sums and subtracted the values that left: the rounding error of the
    large early losses stayed, so from 1e6 most healthy steps after the decay were flagged
    as spikes (skipped), and from 1e8 the limit was ~650x too high (spikes passed). A run
    resumed from the window's values judged the same steps otherwise."""
    rng = random.Random(2)
    live = dt.AnomalyDetector("skip", window=100, k=6.0)
    resumed: dt.AnomalyDetector | None = None
    level, decay = start, (1e-2 / start) ** (1 / 2000)
    flagged, differ = 0, 0
    for step in range(3000):
        loss = max(level, 1e-2) * rng.uniform(0.95, 1.05)
        level *= decay
        if step == 2500:  # a checkpoint and a resume here
            resumed = dt.AnomalyDetector("skip", window=100, k=6.0)
            resumed.load_state_dict(live.state_dict())
        verdict = live.check(loss, None)
        if step >= 2000:
            flagged += verdict is not None
        if resumed is not None:
            differ += resumed.check(loss, None) != verdict
    assert flagged == 0
    assert differ == 0
    assert resumed is not None
    window = list(live.state_dict()["loss"])  # type: ignore[call-overload]
    assert live._loss.limit == pytest.approx(_exact_limit(window, 6.0), rel=1e-12)
    assert resumed._loss.limit == live._loss.limit  # the same values, the same limit


def test_a_spike_after_the_decay_is_found_by_the_live_and_the_resumed_run() -> None:
    rng = random.Random(1)
    live = dt.AnomalyDetector("skip", window=100, k=6.0)
    level, decay = 1e5, (1e-3 / 1e5) ** (1 / 2000)
    for _ in range(2500):
        live.check(max(level, 1e-3) * rng.uniform(0.95, 1.05), None)
        level *= decay
    resumed = dt.AnomalyDetector("skip", window=100, k=6.0)
    resumed.load_state_dict(live.state_dict())
    spike = 4e-3  # 4x the flat loss
    assert live.check(spike, None) == resumed.check(spike, None) == "loss_spike"


def test_a_window_shorter_than_its_history_is_refused_by_name(tmp_path: Path) -> None:
    """``anomaly_window`` below 20 (the detector's ``min_history``) left the limit infinite
    for good: spike detection silently off."""
    with pytest.raises(ConfigError, match="min_history"):
        dt.AnomalyDetector("skip", window=10)
    short = dt.AnomalyDetector("skip", window=10, min_history=10)  # asked for: it works
    for i in range(30):
        assert short.check(1.0 + 0.01 * (i % 3), 1.0 + 0.01 * (i % 5)) is None
    assert short.check(1e6, 1.0) == "loss_spike"
    assert short.check(1.0, 1e6) == "grad_spike"
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for window in (10, 19):
        with pytest.raises(ConfigError, match="anomaly_window"):
            dt.init(
                model,
                opt,
                global_batch_size=8,
                anomaly_window=window,
                metrics_file=False,
                environ={},
            )
    data = tiny_regression(256)
    with dt.init(
        model,
        opt,
        global_batch_size=8,
        dataset_size=len(data),
        anomaly_window=20,
        shuffle=False,
        metrics_file=False,
        environ={},
    ) as ctx:
        batches = ctx.batches(data)
        for _ in range(25):
            ctx.step(next(batches), mse_loss)
        result = ctx.step(next(batches), lambda m, b: mse_loss(m, b) * 1000.0)
    assert result.anomaly in ("grad_spike", "loss_spike") and not result.applied
