"""The ``"rollback"`` anomaly action on a batch that is bad in itself: the replay from the
checkpoint meets the same anomaly at the same step, so rolling back again would never end.
The run rolls back once per step, then skips that step's batch."""

from __future__ import annotations

from pathlib import Path

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
