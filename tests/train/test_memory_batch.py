"""The starting micro-batch from a memory model: ``micro_batch_size=`` > ``DANLU_BATCH_SIZE`` >
the largest micro-batch a ``danlu.estimate`` memory model predicts to fit the memory limit
(5 % spare) > the whole local batch."""

from __future__ import annotations

from pathlib import Path

import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.estimate.memory import TraceRequest, fit_memory_model, get_gpu
from danlu.train.batch import MEMORY_MARGIN, estimated_micro_batch


class LinearMemory:
    """M(b) = 1 MB + 100 kB * b, with an exact ``max_batch``."""

    def predict(self, batch_size: int) -> int:
        return 1_000_000 + 100_000 * batch_size

    def max_batch(self, limit_bytes: int, margin_bytes: int = 0) -> int | None:
        b = (limit_bytes - margin_bytes - 1_000_000) // 100_000
        return b if b >= 1 else None


class Broken:
    def predict(self, batch_size: int) -> int:
        raise RuntimeError("no trace")

    def max_batch(self, limit_bytes: int, margin_bytes: int = 0) -> int | None:
        raise RuntimeError("no trace")


def _micro(memory_model: object, environ: dict[str, str], **kwargs: int) -> int:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ctx = dt.init(
        model,
        opt,
        global_batch_size=64,
        metrics_file=False,
        memory_model=memory_model,
        environ=environ,
        **kwargs,  # type: ignore[arg-type]
    )
    with ctx:
        return ctx.batch.micro


def test_the_memory_model_sets_the_micro_batch_under_the_limit() -> None:
    limit = {"DANLU_GPU_MEMORY_LIMIT": "3000000"}
    # (3.0 MB - 5 % - 1 MB) / 100 kB = 18.5 -> 18
    assert _micro(LinearMemory(), limit) == 18
    assert LinearMemory().predict(18) <= 3_000_000 * (1 - MEMORY_MARGIN)
    assert LinearMemory().predict(19) > 3_000_000 * (1 - MEMORY_MARGIN)
    # the scheduler's DANLU_BATCH_SIZE and the caller's micro_batch_size come first
    assert _micro(LinearMemory(), {**limit, "DANLU_BATCH_SIZE": "8"}) == 8
    assert _micro(LinearMemory(), limit, micro_batch_size=4) == 4
    # never above the local batch
    assert _micro(LinearMemory(), {"DANLU_GPU_MEMORY_LIMIT": str(10**12)}) == 64


def test_without_a_limit_a_model_or_a_working_model_the_local_batch_is_used() -> None:
    assert _micro(LinearMemory(), {}) == 64  # CPU, no DANLU_GPU_MEMORY_LIMIT
    assert _micro(None, {"DANLU_GPU_MEMORY_LIMIT": "3000000"}) == 64
    assert _micro(Broken(), {"DANLU_GPU_MEMORY_LIMIT": "3000000"}) == 64
    # not even one sample fits: no estimate, the OOM guard takes over
    assert estimated_micro_batch(LinearMemory(), 1_000_000) is None


def test_a_fitted_danlu_estimate_model_plugs_in() -> None:
    gpu = get_gpu("a100-80gb")
    fitted = fit_memory_model(TraceRequest("danlu.estimate.zoo:resnet_tiny", (2, 4, 8)), gpu)
    limit = fitted.predict(24)
    expected = estimated_micro_batch(fitted, limit, upper=64)
    assert expected is not None and 1 <= expected < 24
    assert fitted.predict(expected) <= limit * (1 - MEMORY_MARGIN)
    assert fitted.predict(expected + 1) > limit * (1 - MEMORY_MARGIN)
    assert _micro(fitted, {"DANLU_GPU_MEMORY_LIMIT": str(limit)}) == expected


def test_a_relaunchs_micro_batch_caps_the_checkpoints(tmp_path: Path) -> None:
    """A resumed run took the checkpoint's micro-batch over the relaunch's ``DANLU_BATCH_SIZE``
    (the scheduler's choice for its new GPU or memory limit) and ``micro_batch_size``: the
    restore came after them. Now the relaunch's own micro-batch holds, or, given none, its
    whole local batch; only a cap an OOM taught the run stays (see
    tests/train/test_batch_restore_review67.py)."""
    data = tiny_regression(128)

    def run(environ: dict[str, str], steps: int, **kwargs: int) -> tuple[int, int, int]:
        model = tiny_model()
        with dt.init(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01),
            global_batch_size=16,
            dataset_size=len(data),
            checkpoint_dir=str(tmp_path),
            checkpoint_every_steps=1,
            metrics_file=False,
            progress=False,
            environ=environ,
            **kwargs,  # type: ignore[arg-type]
        ) as ctx:
            batches = ctx.batches(data)
            while ctx.step_num < steps:
                ctx.step(next(batches), mse_loss)
            batches.close()
            return ctx.batch.micro, ctx.batch.micro_cap, ctx.batch.accumulation

    assert run({"DANLU_BATCH_SIZE": "16"}, 1) == (16, 16, 1)
    assert run({"DANLU_BATCH_SIZE": "4"}, 2) == (4, 4, 4)  # resumed at step 1
    assert run({}, 3, micro_batch_size=2) == (2, 2, 8)  # resumed at step 2
    # the checkpoint's 2 was given, not an OOM's: the relaunch's own holds
    assert run({"DANLU_BATCH_SIZE": "8"}, 4) == (8, 8, 2)
    assert run({}, 5) == (16, 16, 1)  # nothing given: the whole local batch
