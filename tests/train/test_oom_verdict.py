"""The OOM guard's verdict that a job cannot fit its memory: raised once even the smallest
micro-batch ran out of memory, through a training step, its message naming what to ask a
danlu cluster for (the executors read its traceback's last line: the verdict's contract)."""

from __future__ import annotations

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.batch import MicroBatchOutOfMemoryError


def test_a_step_that_runs_out_of_memory_at_every_micro_batch_gives_the_verdict() -> None:
    data = tiny_regression(n=32)
    model = tiny_model()
    ctx = dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        global_batch_size=8,
        micro_batch_size=8,
        dataset_size=len(data),
        metrics_file=False,
        oom_injector=dt.inject_oom_at(1, times=10**6),
        environ={},
        progress=False,
    )
    with ctx, pytest.raises(MicroBatchOutOfMemoryError) as raised:
        for batch in ctx.batches(data):
            ctx.step(batch, mse_loss)
    message = str(raised.value)
    assert message.startswith("out of memory even at micro-batch 1, the smallest"), message
    assert "resources.gpu_memory" in message and "whole GPUs" in message, message
    assert isinstance(raised.value.__cause__, torch.OutOfMemoryError)
    assert ctx.batch.oom_count == 3  # 8 -> 4 -> 2 -> 1, then the verdict
