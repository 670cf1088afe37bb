"""The LR controller and two things a training script plausibly does: step the scheduler
passed to ``init`` itself (once per epoch, as torch's examples do), which made it run ahead
silently, and add a parameter group to the optimizer after ``init`` (unfreezing a part),
which made every later step fail with a bare ``ValueError`` of ``zip``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tests.train.train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError


def test_a_scheduler_stepped_by_the_script_too_is_refused_naming_the_fix() -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    data = tiny_regression(64)
    with dt.init(model, opt, sched, global_batch_size=16, dataset_size=64) as ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
        assert sched.last_epoch == ctx.step_num == 4  # one scheduler step per optimizer step
        sched.step()  # the script's own, once per epoch
        batch = next(iter(torch.utils.data.DataLoader(data, batch_size=16)))
        with pytest.raises(ConfigError, match=r"StepLR\) was stepped outside danlu") as err:
            ctx.step(batch, mse_loss)
    assert "remove the script's scheduler.step()" in str(err.value)
    assert "steps_per_epoch" in str(err.value)


def test_a_scheduler_only_ctx_steps_is_not_refused_also_after_a_resume(tmp_path: Path) -> None:
    data = tiny_regression(64)

    def run(steps: int) -> tuple[int, float]:
        model = tiny_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        with dt.init(
            model, opt, sched, global_batch_size=16, dataset_size=64, checkpoint_dir=str(tmp_path)
        ) as ctx:
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
                if ctx.step_num >= steps:
                    break
            ctx.save()
            return sched.last_epoch, float(opt.param_groups[0]["lr"])

    assert run(2) == (2, 0.1)
    assert run(4) == (4, 0.05)  # resumed at step 2: the loaded scheduler state is no misuse


def test_a_parameter_group_added_after_init_trains_with_its_own_lr_scaled() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model[0].parameters(), lr=0.1)
    data = tiny_regression(64)
    with dt.init(model, opt, global_batch_size=16, dataset_size=64, warmup_steps=8) as ctx:
        frozen = model[1].weight.detach().clone()
        opt.add_param_group({"params": model[1].parameters(), "lr": 0.04})
        for batch in ctx.batches(data):
            ctx.step(batch, mse_loss)
        assert ctx.step_num == 4
        # warmup (4 + 1) / 8 of each group's own LR
        assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.0625, 0.025])
    assert not torch.equal(model[1].weight, frozen)  # the added group trained


def test_a_plateau_scheduler_stepped_by_the_script_is_refused_naming_plateau_step() -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    data = tiny_regression(64)
    batch = next(iter(torch.utils.data.DataLoader(data, batch_size=16)))
    with dt.init(model, opt, plateau, global_batch_size=16, dataset_size=64) as ctx:
        ctx.step(batch, mse_loss)
        ctx.lr.plateau_step(1.0)  # the way in: not refused
        ctx.step(batch, mse_loss)
        plateau.step(2.0)  # the script's own: its reduction was undone by the next step
        with pytest.raises(ConfigError, match=r"ctx.lr.plateau_step\(metric\)"):
            ctx.step(batch, mse_loss)
