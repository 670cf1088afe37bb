"""A training context used after it closed: ``save()`` and ``step()`` are refused with a
``ConfigError`` saying so (they wrote and recorded nothing, silently), and a record of the
script's own reported after it is still shipped (it was queued for a stopped thread and lost)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from train_helpers import mse_loss, small_context, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError


def _trained_and_closed(directory: Path) -> dt.TrainContext:
    """A :func:`small_context` trained one epoch (4 steps) in a with block, now closed."""
    data = tiny_regression(16)
    with small_context(directory) as ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
    return ctx


def test_save_after_close_is_refused_not_silently_skipped(tmp_path: Path) -> None:
    ctx = _trained_and_closed(tmp_path / "ckpt")
    before = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    with pytest.raises(ConfigError, match=r"ctx\.save\(\).*closed"):
        ctx.save()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == before


def test_step_after_close_is_refused_and_trains_nothing(tmp_path: Path) -> None:
    ctx = _trained_and_closed(tmp_path / "ckpt")
    weights = [p.detach().clone() for p in ctx.model.parameters()]
    data = tiny_regression(16)
    with pytest.raises(ConfigError, match=r"ctx\.step\(\).*closed"):
        ctx.step(data[0:4], mse_loss)
    assert ctx.step_num == 4
    assert len(ctx.history) == 4
    for before, after in zip(weights, ctx.model.parameters(), strict=True):
        assert torch.equal(before, after)


def test_record_reported_after_fit_returned_reaches_the_metrics_file(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    model = tiny_model()
    ctx = dt.fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        tiny_regression(16),
        mse_loss,
        epochs=1,
        global_batch_size=4,
        metrics_file=str(metrics),
        progress=False,
        environ={},
    )
    ctx.reporter.report({"step": ctx.step_num, "test_loss": 0.25})
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert records[-1] == {"step": 4, "test_loss": 0.25}
    assert [r["step"] for r in records[:-1]] == [1, 2, 3, 4]
