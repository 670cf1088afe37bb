"""An out-of-memory error after a step's backward passes, in gradient clipping (or fp16's
unscale), is recovered as one in a forward pass: the gradients are dropped, the micro-batch
halved and the step retried, its update applied once. Before, only the forward and backward
passes were guarded, and an OOM in ``clip_grad_norm_`` ended the run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.batch import MicroBatchOutOfMemoryError

ClipFn = Callable[..., torch.Tensor]


def _clip_failing(times: int) -> tuple[ClipFn, list[int]]:
    """``torch.nn.utils.clip_grad_norm_`` that raises an OOM on its first ``times`` calls
    (after scaling the gradients, as a failure half-way through would leave them), and the
    count of its calls."""
    real = torch.nn.utils.clip_grad_norm_
    calls = [0]

    def clip(params: Any, max_norm: float, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls[0] += 1
        if calls[0] <= times:
            with torch.no_grad():
                for p in params:
                    if p.grad is not None:
                        p.grad.mul_(0.5)
            raise torch.OutOfMemoryError("CUDA out of memory (clipping, injected)")
        return real(params, max_norm, *args, **kwargs)

    return clip, calls


def _train(
    micro: int, precision: str = "fp32", steps: int = 3
) -> tuple[dt.TrainContext, list[Any]]:
    data = tiny_regression(n=16 * steps)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ctx = dt.init(
        model,
        opt,
        global_batch_size=16,
        micro_batch_size=micro,
        precision=precision,
        clip_grad_norm=0.5,
        dataset_size=len(data),
        shuffle=False,
        metrics_file=False,
        environ={},
    )
    with ctx:
        results = [ctx.step(b, mse_loss) for b in ctx.batches(data)]
    return ctx, results


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_an_oom_in_clipping_halves_the_micro_batch_and_applies_the_update_once(
    monkeypatch: pytest.MonkeyPatch, precision: str
) -> None:
    """fp16: the failed attempt had unscaled the gradients already; the retry unscales its
    own (the scaler refused a second unscale_ before)."""
    clip, calls = _clip_failing(1)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    recovered, results = _train(16, precision)
    assert calls[0] == 4  # the failed call, then one per step
    assert [r.ooms for r in results] == [1, 0, 0]
    assert (recovered.batch.micro, recovered.batch.accumulation) == (8, 2)
    assert recovered.batch.oom_count == 1
    monkeypatch.undo()
    reference, expected = _train(8, precision)  # the smaller micro-batch from the start
    assert [r.loss for r in results] == pytest.approx([r.loss for r in expected], rel=1e-6)
    assert [r.applied for r in results] == [r.applied for r in expected]
    assert any(r.applied for r in results)
    for got, want in zip(recovered.model.parameters(), reference.model.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    if precision == "fp16":
        assert recovered.precision.loss_scale == reference.precision.loss_scale


def test_an_oom_in_clipping_at_the_smallest_micro_batch_is_the_oom_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clip, _ = _clip_failing(10)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    with pytest.raises(MicroBatchOutOfMemoryError, match="micro-batch 1") as caught:
        _train(2)
    assert isinstance(caught.value.__cause__, torch.OutOfMemoryError)


def test_an_error_in_clipping_other_than_an_oom_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def clip(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise RuntimeError("shape mismatch in clipping")

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        _train(16)
