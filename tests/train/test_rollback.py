"""The ``"rollback"`` anomaly action on a batch that is bad in itself: the replay from the
checkpoint meets the same anomaly at the same step, so rolling back again would never end.
The run rolls back once per step, then skips that step's batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt


def _poisoned() -> torch.utils.data.TensorDataset:
    data = tiny_regression(n=32)
    data.tensors[0][5, 0] = float("nan")  # in the second batch of 4 (no shuffling)
    return data


def _train(**kw: object) -> tuple[dt.TrainContext, int]:
    """One epoch of 8 batches of 4; fails if the run keeps training on without moving on."""
    data = _poisoned()
    model = tiny_model()
    attempts = 0
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        dataset_size=len(data),
        shuffle=False,
        anomaly="rollback",
        metrics_file=False,
        progress=False,
        environ={},
        **kw,  # type: ignore[arg-type]
    ) as ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
                attempts += 1
                assert attempts < 50, "the run keeps meeting the same anomaly"
        assert all(torch.isfinite(p).all() for p in model.parameters())
        return ctx, attempts


def test_a_bad_batch_is_rolled_back_for_once_then_skipped(tmp_path: Path) -> None:
    ctx, attempts = _train(checkpoint_dir=str(tmp_path), checkpoint_every_steps=1)
    assert ctx.rollbacks == 1  # back to step 1's checkpoint, whose replay meets it again
    assert ctx.step_num == 8 and attempts == 9  # 8 steps, the bad one tried twice
    assert ctx.anomaly is not None and ctx.anomaly.counts == {"nonfinite_loss": 2}


def test_without_a_checkpoint_the_bad_batch_is_skipped_and_consumed() -> None:
    """Before, the batch was not consumed: the same batch came again, for good."""
    ctx, attempts = _train()
    assert ctx.rollbacks == 0 and ctx.step_num == 8 and attempts == 8


def test_the_lr_decay_compounds_over_rollbacks_to_the_same_checkpoint(tmp_path: Path) -> None:
    """Two anomalies after the same checkpoint: the second rollback reloaded the
    checkpoint's decay (1) and multiplied it once, so the LR went back to base x 0.5
    instead of x 0.25."""
    data = tiny_regression(n=64)
    model = tiny_model()
    bad = {5, 7}  # the steps whose loss is NaN the first time they run
    seen: set[int] = set()
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        global_batch_size=4,
        dataset_size=len(data),
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=4,
        anomaly="rollback",
        metrics_file=False,
        progress=False,
        environ={},
    ) as ctx:
        lrs = []
        for batch in ctx.batches(data):
            step = ctx.step_num + 1

            def loss(
                m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor], step: int = step
            ) -> torch.Tensor:
                value = mse_loss(m, b)
                if step in bad and step not in seen:
                    seen.add(step)
                    return value * float("nan")
                return value

            if ctx.step(batch, loss).anomaly is not None:
                lrs.append(ctx.lr.lr)
            if ctx.step_num >= 10:
                break
        assert ctx.rollbacks == 2
        assert lrs == [pytest.approx(0.05), pytest.approx(0.025)]
        assert ctx.lr.decay == pytest.approx(0.25)


def test_the_anomaly_total_keeps_the_anomaly_a_rollback_went_back_past(tmp_path: Path) -> None:
    """After a rollback the counts kept the anomaly that caused it but the total (the
    records' ``anomalies``) went back to the checkpoint's: total and counts disagreed."""
    data = tiny_regression(n=32)
    model = tiny_model()
    fired: list[int] = []

    def loss(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        value = mse_loss(m, b)
        if len(fired) == 0 and ctx.step_num == 4:
            fired.append(1)
            return value * float("nan")
        return value

    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        dataset_size=len(data),
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=1,
        anomaly="rollback",
        metrics_file=False,
        progress=False,
        environ={},
    ) as ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, loss)
        assert ctx.rollbacks == 1 and fired
        assert ctx.anomaly is not None and ctx.anomaly.counts == {"nonfinite_loss": 1}
        assert ctx.anomaly.total == 1
        assert [r["anomalies"] for r in ctx.history[4:]] == [1] * (len(ctx.history) - 4)
