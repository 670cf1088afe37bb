"""Exact resume under plausible scripts: a SIGTERM in the middle of an epoch, a resumed
run, and an uninterrupted one end with the same parameters, buffers, optimizer and scaler
states, step counters and metric records (each step's once). The scripts: gradient
accumulation (a micro-batch smaller than the batch), fp16 with its GradScaler, batch
normalisation's running statistics, dropout (the RNG), an optimizer with per-group LRs and
a scheduler, with and without ``init``'s ``dataset_size``."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_regression

import danlu.train as dt

EPOCHS = 3
STEPS_PER_EPOCH = 5  # 40 samples, 8 a step


@pytest.fixture(autouse=True)
def quiet_sigterm() -> Iterator[None]:
    """A SIGTERM handler below the contexts' that does nothing (restored after)."""

    def ignore(signum: int, frame: FrameType | None) -> None:
        pass

    original = signal.signal(signal.SIGTERM, ignore)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, original)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16),
        torch.nn.BatchNorm1d(16),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.2),
        torch.nn.Linear(16, 1),
    )


def _run(
    directory: Path, settings: dict[str, Any], *, signal_at: int | None = None
) -> tuple[dt.TrainContext, torch.nn.Module, torch.optim.Optimizer]:
    """Train ``EPOCHS`` epochs; a real SIGTERM during step ``signal_at + 1``'s batch."""
    model = _model()
    groups = [
        {"params": list(model[0].parameters()) + list(model[1].parameters()), "lr": 0.02},
        {"params": list(model[4].parameters()), "lr": 0.005},
    ]
    opt = torch.optim.AdamW(groups, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    dataset = tiny_regression(n=40)
    ctx = dt.init(
        model,
        opt,
        sched,
        global_batch_size=8,
        drop_last=True,  # batch normalisation: no one-sample last batch
        checkpoint_dir=str(directory / "ckpt"),
        metrics_file=str(directory / "metrics.jsonl"),
        report_interval_s=0.05,
        environ={},
        **settings,
    )
    with ctx:
        for _ in ctx.epochs(EPOCHS):
            for batch in ctx.batches(dataset):
                if ctx.step_num == signal_at:
                    signal.raise_signal(signal.SIGTERM)
                ctx.step(batch, mse_loss)
    return ctx, model, opt


SCENARIOS = {
    "accumulation": {"micro_batch_size": 2, "dataset_size": 40},
    "fp16_scaler": {"precision": "fp16", "micro_batch_size": 4},
    "plain_no_dataset_size": {},
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_sigterm_mid_epoch_resumes_as_if_uninterrupted(tmp_path: Path, name: str) -> None:
    settings = SCENARIOS[name]
    whole, whole_model, whole_opt = _run(tmp_path / "whole", settings)
    with pytest.raises(SystemExit) as stopped:
        _run(tmp_path / "cut", settings, signal_at=STEPS_PER_EPOCH + 2)  # mid-epoch 1
    assert stopped.value.code == dt.PREEMPTED_EXIT_CODE
    resumed, model, opt = _run(tmp_path / "cut", settings)

    total = EPOCHS * STEPS_PER_EPOCH
    assert whole.step_num == resumed.step_num == total
    assert whole.engine.step_count == resumed.engine.step_count
    assert whole.precision.skipped_steps == resumed.precision.skipped_steps
    if whole.precision.scaling:
        assert whole.precision.loss_scale == resumed.precision.loss_scale
    expected, got = whole_model.state_dict(), model.state_dict()
    assert expected.keys() == got.keys()  # BatchNorm's running statistics included
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], msg=key)
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in whole_opt.param_groups]
    for a, b in zip(whole_opt.state.values(), opt.state.values(), strict=True):
        for key in a:
            torch.testing.assert_close(b[key], a[key])
    assert [r["step"] for r in resumed.history] == list(range(1, total + 1))
    for a_record, b_record in zip(whole.history, resumed.history, strict=True):
        assert a_record["lr"] == pytest.approx(b_record["lr"])
        assert a_record["loss"] == pytest.approx(b_record["loss"], rel=1e-5)
    lines = (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()
    steps = [r["step"] for r in map(json.loads, lines) if "loss" in r]
    assert sorted(steps) == list(range(1, total + 1))  # each step's record once
