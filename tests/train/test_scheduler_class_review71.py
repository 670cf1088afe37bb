"""Resuming a checkpoint with another LR scheduler class is refused before anything is
loaded (a ``StepLR`` state was loaded into ``CosineAnnealingLR``, a schedule of neither, and
into ``LambdaLR`` failed with a bare ``KeyError``); a checkpoint's scheduler with none given
now is dropped with a WARNING."""

from __future__ import annotations

import logging

import pytest
import torch

from danlu.train.state import (
    IncompatibleCheckpointError,
    capture_state,
    check_compatible,
    restore_state,
)


def _parts() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(3, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_another_scheduler_class_is_refused() -> None:
    model, opt = _parts()
    step = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    state = capture_state(model, opt, step=4, scheduler=step)
    assert state["scheduler_class"] == "torch.optim.lr_scheduler.StepLR"
    model2, opt2 = _parts()
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt2, T_max=10)
    with pytest.raises(IncompatibleCheckpointError, match="StepLR in the checkpoint"):
        restore_state(state, model2, opt2, scheduler=cosine)
    assert not hasattr(cosine, "step_size")  # nothing was loaded into it
    lam = torch.optim.lr_scheduler.LambdaLR(opt2, lambda epoch: 1.0)
    with pytest.raises(IncompatibleCheckpointError, match="LambdaLR now"):
        check_compatible(state, model2, opt2, lam)


def test_the_same_class_and_an_older_checkpoint_resume() -> None:
    model, opt = _parts()
    state = capture_state(
        model, opt, step=4, scheduler=torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    )
    model2, opt2 = _parts()
    check_compatible(state, model2, opt2, torch.optim.lr_scheduler.StepLR(opt2, step_size=2))
    del state["scheduler_class"]  # written before the class was recorded
    check_compatible(state, model2, opt2, torch.optim.lr_scheduler.ExponentialLR(opt2, 0.9))


def test_a_dropped_scheduler_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    model, opt = _parts()
    state = capture_state(
        model, opt, step=4, scheduler=torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    )
    model2, opt2 = _parts()
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        check_compatible(state, model2, opt2, None)
    assert "scheduler (torch.optim.lr_scheduler.StepLR) is dropped" in caplog.text
