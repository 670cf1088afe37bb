"""OOM recovery on a real CUDA out-of-memory error (``gpu``-marked; skipped without
``nvidia-smi``): under ``DANLU_GPU_MEMORY_LIMIT`` a micro-batch that does not fit raises
torch's OOM, and the step halves the micro-batch and trains on. ``test_oom.py`` covers the
same path with an injected OOM on any host."""

from __future__ import annotations

import math
import shutil
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset
from train_helpers import cross_entropy_loss, sign_task

import danlu.train as dt
from danlu.estimate.memory.gpus import UNKNOWN_CONTEXT_BYTES
from danlu.train.oom import OptimizerStepOutOfMemoryError

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU here"),
]

LIMIT = (1 << 30) + UNKNOWN_CONTEXT_BYTES
"""The job's memory limit: about 1 GiB for the caching allocator, since the cap leaves out the
CUDA context (at least the GPU type's allowance; 768 MiB covers every GPU of the table)."""


def _fresh_gpu() -> None:
    """Skip without CUDA; else drop the blocks cached by earlier tests (they would count
    against the limit), reset the peak and seed torch."""
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)


def _fit_under_limit(
    model: nn.Module, opt: torch.optim.Optimizer, data: Dataset[Any], **settings: Any
) -> dt.TrainContext:
    """``dt.fit`` of the cross-entropy loss under ``DANLU_GPU_MEMORY_LIMIT`` = :data:`LIMIT`;
    the process's memory fraction is put back and the cache emptied after, however it
    ends."""
    try:
        return dt.fit(
            model,
            opt,
            data,
            cross_entropy_loss,
            environ={"DANLU_GPU_MEMORY_LIMIT": str(LIMIT)},
            **settings,
        )
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, 0)
        torch.cuda.empty_cache()


def test_a_real_cuda_oom_halves_the_micro_batch_and_training_goes_on() -> None:
    _fresh_gpu()
    _, data = sign_task(8192, 1024)
    # 134 MB of weights; about 260 KB of activations a sample: 8,192 samples need ~2 GiB
    model = nn.Sequential(nn.Linear(1024, 32768), nn.ReLU(), nn.Linear(32768, 2))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ctx = _fit_under_limit(model, opt, data, epochs=5, global_batch_size=8192, max_steps=3)
    last = ctx.history[-1]
    assert last["step"] == 3 and last["oom_count"] >= 1, last
    assert last["micro_batch"] < 8192 and last["accumulation"] >= 2, last
    assert last["global_batch"] == 8192  # the optimizer step keeps the batch it was tuned for
    assert all(math.isfinite(r["loss"]) for r in ctx.history)
    assert 0 < last["memory_bytes"] <= LIMIT


def test_a_real_cuda_oom_in_the_optimizer_step_is_raised_as_not_retried() -> None:
    """Adam allocates its state (two tensors the size of the parameters) in its first step:
    with 336 MB of weights, the forward and backward passes fit in 1 GiB, the state does not,
    and torch's real OOM comes out of ``optimizer.step()``, which the step raises as
    :class:`OptimizerStepOutOfMemoryError` (no halving: the state does not shrink with the
    micro-batch) from the CUDA error itself."""
    _fresh_gpu()
    _, data = sign_task(64, 1024)
    model = nn.Sequential(nn.Linear(1024, 81920), nn.ReLU(), nn.Linear(81920, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with pytest.raises(OptimizerStepOutOfMemoryError, match="optimizer step") as caught:
        _fit_under_limit(model, opt, data, epochs=1, global_batch_size=8, max_steps=2)
    assert isinstance(caught.value.__cause__, torch.OutOfMemoryError), caught.value.__cause__
