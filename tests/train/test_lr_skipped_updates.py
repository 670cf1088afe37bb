"""The LR schedule counts optimizer updates: a step the fp16 GradScaler skips (NaN/Inf
gradients) or an anomaly skips neither steps the scheduler passed to ``init`` nor advances the
warmup. Before, ``ctx.step`` stepped the scheduler anyway: the schedule ran one step ahead of
an unscaled run for every skipped update, and torch warned "``lr_scheduler.step()`` before
``optimizer.step()``" when the first step was skipped."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch
from tests.train.train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.lr import LRController

Batch = tuple[torch.Tensor, torch.Tensor]


def _overflowing_first(scale: float) -> Callable[[torch.nn.Module, Batch], torch.Tensor]:
    """``mse_loss``, multiplied by ``scale`` on its first call only."""
    calls: list[int] = []

    def loss_fn(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        calls.append(1)
        loss = mse_loss(model, batch)
        return loss * scale if len(calls) == 1 else loss

    return loss_fn


def _run(
    precision: str, loss_fn: Callable[[torch.nn.Module, Batch], torch.Tensor], steps: int
) -> tuple[list[tuple[bool, float]], int]:
    """Train ``steps`` steps with a halving StepLR and a 2-step warmup; returns each step's
    (applied, LR used) and the scheduler's final ``last_epoch``."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    seen: list[tuple[bool, float]] = []
    with dt.init(
        model,
        opt,
        sched,
        global_batch_size=16,
        dataset_size=64,
        precision=precision,
        warmup_steps=2,
        metrics_file=False,
        environ={},
    ) as ctx:
        for batch in ctx.batches(tiny_regression(64)):
            result = ctx.step(batch, loss_fn)
            seen.append((result.applied, result.lr))
            if ctx.step_num >= steps:
                break
    return seen, sched.last_epoch


def test_a_step_the_scaler_skips_does_not_step_the_scheduler() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # x 1e36 under the initial loss scale 2**16 overflows float32: the scaler skips it
        scaled, last_epoch = _run("fp16", _overflowing_first(1e36), 4)
    assert [applied for applied, _ in scaled] == [False, True, True, True]
    assert last_epoch == 3  # one scheduler step per applied update (4 before)
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]
    plain, _ = _run("fp32", mse_loss, 3)
    # the applied updates used the LRs of an unscaled run's first three steps
    assert [lr for _, lr in scaled[1:]] == [lr for _, lr in plain]


def test_the_controller_moves_neither_warmup_nor_scheduler_for_a_skipped_update() -> None:
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    lr = LRController(opt, sched, warmup_steps=4, grad_norm_tau=1.0)
    lr.before_step(4.0)  # the norm factor 1/4 for this step
    lr.after_step(False)
    assert (lr.steps, sched.last_epoch) == (0, 0)
    assert math.isclose(lr.lr, 0.25)  # warmup 1/4, the norm factor dropped
    opt.step()
    lr.after_step()
    assert (lr.steps, sched.last_epoch) == (1, 1)
    assert math.isclose(lr.lr, 0.5 * 0.5)  # warmup 2/4 x the scheduler's 0.5


def test_a_step_an_anomaly_skips_does_not_step_the_scheduler() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # a NaN loss on the first step: the anomaly action "skip" (init's default) skips it
        skipped, last_epoch = _run("fp32", _overflowing_first(math.nan), 3)
    assert [applied for applied, _ in skipped] == [False, True, True]
    assert last_epoch == 2
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]
