"""An out-of-memory error inside ``optimizer.step()`` is not retried (the step may have updated
part of the parameters or the optimizer's state, which a retry would apply twice, and its
memory does not shrink with the micro-batch). It propagated as torch's bare
``OutOfMemoryError`` from deep inside the optimizer, which said neither where it struck nor
that danlu's OOM recovery did not (and why); it is now an OptimizerStepOutOfMemoryError that
says so, raised from the original, and still classified as out of memory by the executors."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.executors.base import Outcome, classify_exit
from danlu.train.context import TrainContext
from danlu.train.oom import OptimizerStepOutOfMemoryError, is_oom


class FailingSGD(torch.optim.SGD):
    """SGD whose ``step`` raises ``error`` on its first call (counted in ``calls``)."""

    def __init__(self, params: Any, error: BaseException) -> None:
        super().__init__(params, lr=0.01)
        self.error = error
        self.calls = 0

    def step(self, closure: Any = None) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise self.error
        return super().step(closure)


def _context(tmp_path: Path, error: BaseException, precision: str = "fp32") -> TrainContext:
    model = tiny_model(seed=0)
    return dt.init(
        model,
        FailingSGD(model.parameters(), error),
        global_batch_size=8,
        micro_batch_size=8,  # a retry at 4 would be possible: it is not taken
        precision=precision,
        dataset_size=16,
        checkpoint_dir=str(tmp_path),
        resume=False,
        metrics_file=False,
        progress=False,
        environ={},
    )


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("CUDA error: out of memory"),
    ],
    ids=["OutOfMemoryError", "RuntimeError"],
)
def test_an_oom_in_the_optimizer_step_says_so_and_is_not_retried(
    tmp_path: Path, error: BaseException
) -> None:
    with _context(tmp_path, error) as ctx:
        optimizer = ctx.optimizer
        assert isinstance(optimizer, FailingSGD)
        for batch in ctx.batches(tiny_regression(16)):
            with pytest.raises(OptimizerStepOutOfMemoryError) as caught:
                ctx.step(batch, mse_loss)
            break
        assert optimizer.calls == 1  # raised at once, not retried
        assert (ctx.batch.micro, ctx.batch.oom_count, ctx.step_num) == (8, 0, 0)
    message = str(caught.value)
    assert message.startswith("out of memory in the optimizer step")
    assert "not retried" in message and "apply twice" in message
    assert "does not shrink with a smaller micro-batch" in message
    assert "DANLU_GPU_MEMORY_LIMIT" in message
    assert caught.value.__cause__ is error
    # the executors still see an out-of-memory death in the log's tail
    tail = "".join(traceback.format_exception(caught.value))
    assert classify_exit(1, tail) is Outcome.OOM
    assert not is_oom(caught.value)  # no OOM to be retried by whoever catches it


def test_an_oom_in_the_optimizer_step_through_the_fp16_scaler_says_so(tmp_path: Path) -> None:
    """Through the GradScaler's ``step`` (fp16) as without it."""
    error = torch.OutOfMemoryError("CUDA out of memory")
    with _context(tmp_path, error, precision="fp16") as ctx:
        assert ctx.precision.scaling
        with pytest.raises(OptimizerStepOutOfMemoryError, match="optimizer step") as caught:
            for _ in ctx.epochs(20):  # the scaler skips the steps its scale overflows
                for batch in ctx.batches(tiny_regression(16)):
                    ctx.step(batch, mse_loss)
        assert ctx.optimizer.calls == 1  # type: ignore[attr-defined]
    assert caught.value.__cause__ is error


def test_another_error_of_the_optimizer_step_is_raised_as_it_is(tmp_path: Path) -> None:
    error = RuntimeError("boom")
    with _context(tmp_path, error) as ctx:
        for batch in ctx.batches(tiny_regression(16)):
            with pytest.raises(RuntimeError, match=r"^boom$") as caught:
                ctx.step(batch, mse_loss)
            break
    assert caught.value is error


def test_a_step_after_no_oom_still_trains(tmp_path: Path) -> None:
    model = tiny_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    before = [p.detach().clone() for p in model.parameters()]
    with dt.init(
        model,
        optimizer,
        global_batch_size=8,
        dataset_size=16,
        metrics_file=False,
        progress=False,
        environ={},
    ) as ctx:
        for batch in ctx.batches(tiny_regression(16)):
            result = ctx.step(batch, mse_loss)
            break
    assert result.applied and ctx.step_num == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
