"""Exact resume on a real GPU (``gpu``-marked; skipped without ``nvidia-smi``): a run stopped
after a checkpoint and resumed in a new context ends with parameters bit-identical to an
uninterrupted run, in fp32, fp16 (the GradScaler's scale and growth tracker come back) and
bf16 autocast, with dropout drawing from the CUDA generator (its state comes back).
``test_resume.py`` covers the same on the CPU, with SIGKILLed processes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torch import nn
from train_helpers import cross_entropy_loss, sign_task

import danlu.train as dt

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU here"),
]

EPOCHS = 3
STOP_AT = 7
"""The step the interrupted run checkpoints and stops at (mid-epoch: 512 samples at a
global batch of 48 are 11 steps an epoch)."""


def _train(
    directory: Path, precision: str, stop_at: int | None
) -> tuple[int, dict[str, torch.Tensor]]:
    """Train (resuming from ``directory``'s newest checkpoint, if any) until the end, or
    save and stop at step ``stop_at``: the step it started from, and the parameters and
    buffers on the CPU (none when it stopped)."""
    torch.manual_seed(0)
    _, data = sign_task(512, 16)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with dt.init(
        model,
        opt,
        global_batch_size=48,
        micro_batch_size=16,  # three micro-batches a step: accumulation
        precision=precision,
        dataset_size=len(data),
        checkpoint_dir=str(directory),
        metrics_file=False,
        progress=False,
        environ={},
    ) as ctx:
        assert next(model.parameters()).is_cuda
        started = ctx.step_num
        for _ in ctx.epochs(EPOCHS):
            for batch in ctx.batches(data):
                ctx.step(batch, cross_entropy_loss)
                if ctx.step_num == stop_at:
                    ctx.save()
                    return started, {}
        steps = ctx.step_num
    assert steps == EPOCHS * 11
    return started, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_a_resumed_run_on_the_gpu_ends_bit_identical(tmp_path: Path, precision: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    assert _train(tmp_path / "parts", precision, STOP_AT) == (0, {})
    started, resumed = _train(tmp_path / "parts", precision, None)
    assert started == STOP_AT  # resumed, not trained again from the start
    _, whole = _train(tmp_path / "whole", precision, None)
    assert whole.keys() == resumed.keys()
    different = [k for k in whole if not torch.equal(whole[k], resumed[k])]
    assert not different, f"{precision}: parameters differ after the resume: {different}"
