"""Out-of-memory recovery helpers: recognising an OOM, releasing memory, injecting one.

The recovery itself lives in the training step (:mod:`danlu.train.step`): the OOM is caught,
the ``except`` block only records it (the exception keeps the failed step's frames, and with them
their tensors, alive), then memory is released *outside* the block, every rank agrees through one
``all_reduce``, under DDP every rank resets the reducer a synchronised forward prepared
(:func:`~danlu.train.accumulate.abandon_sync`), the micro-batch is halved, accumulation doubled
and the step retried. An OOM after the backward passes, unscaling (fp16), clipping or taking
the gradient norm, is retried the same way in one process (no update was applied yet; under
DDP the peers have gone on, and it is raised). One in the optimizer step is raised as an
:class:`OptimizerStepOutOfMemoryError` saying why it cannot be retried.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch

from danlu.core.errors import ConfigError

OOMInjector = Callable[[int, int], bool]
"""``injector(step, micro_batch) -> bool``: True makes the next forward raise an OOM (tests)."""


class OptimizerStepOutOfMemoryError(ConfigError):
    """Out of memory in the optimizer step (``optimizer.step()``, through the fp16 scaler
    or not), after the step's forward and backward passes: never retried, since the step
    may have updated part of the parameters or the optimizer's state already (a retry would
    apply that part twice), and its memory does not shrink with the micro-batch.

    Raised from the out-of-memory error itself (``raise ... from``). Its name ends in
    ``OutOfMemoryError`` for the executors to classify the run as out of memory
    (``danlu.executors.base.classify_exit``), as
    :class:`~danlu.train.batch.MicroBatchOutOfMemoryError`."""


OPTIMIZER_STEP_OOM = (
    "out of memory in the optimizer step (optimizer.step(), after the forward and backward "
    "passes); not retried: the optimizer may already have updated some parameters or their "
    "state, which a retry would apply twice, and the step's memory (parameters, gradients, "
    "optimizer state) does not shrink with a smaller micro-batch. Resume from the last "
    "checkpoint with more GPU memory (raise DANLU_GPU_MEMORY_LIMIT, or use a GPU with more "
    "memory) or an optimizer step that needs less at once (foreach=False, a fused "
    "optimizer, or a sharded optimizer state)"
)
"""The message of :class:`OptimizerStepOutOfMemoryError`."""


def is_oom(exc: BaseException) -> bool:
    """True for CUDA (or any torch) out-of-memory errors."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def smallest_micro_batch(model: torch.nn.Module) -> int:
    """The smallest micro-batch OOM recovery may halve down to: 2 for a model with batch
    normalisation (it cannot train on one sample: it raises, or learns from no variance), else
    1."""
    batch_norm = torch.nn.modules.batchnorm._BatchNorm
    return 2 if any(isinstance(m, batch_norm) for m in model.modules()) else 1


class RunningStats:
    """The running statistics of a model's normalisation layers (batch norm, instance norm
    with ``track_running_stats``: ``running_mean``, ``running_var``, ``num_batches_tracked``),
    saved before a step's first attempt and put back before an OOM retry.

    A forward pass in training mode moves them; a step that runs out of memory on a later
    micro-batch has already moved them for the earlier ones, which the retry (at a smaller
    micro-batch) runs again: without :meth:`restore` those samples would count twice.
    :meth:`save` is one fused copy into buffers kept from step to step (re-made when the
    model's buffers were replaced, e.g. by ``model.to()``); a model without such layers
    costs nothing (:attr:`present` is False)."""

    _NAMES = ("running_mean", "running_var", "num_batches_tracked")

    def __init__(self, model: torch.nn.Module) -> None:
        norm = torch.nn.modules.batchnorm._NormBase
        self._modules = [m for m in model.modules() if isinstance(m, norm)]
        self.present = bool(self._modules)
        """The model has normalisation layers whose statistics a retry must put back."""
        self._live: list[torch.Tensor] = []
        self._saved: list[torch.Tensor] = []

    def _buffers(self) -> list[torch.Tensor]:
        found = (m._buffers.get(name) for m in self._modules for name in self._NAMES)
        return [b for b in found if b is not None]

    def save(self) -> None:
        """Copy the statistics as they are now."""
        live = self._buffers()
        with torch.no_grad():
            if len(live) == len(self._live) and all(
                a is b for a, b in zip(live, self._live, strict=True)
            ):
                if live:
                    torch._foreach_copy_(self._saved, live)
            else:
                self._live = live
                self._saved = [b.detach().clone() for b in live]

    def restore(self) -> None:
        """Put back the statistics of the last :meth:`save`."""
        if self._live:
            with torch.no_grad():
                torch._foreach_copy_(self._live, self._saved)


def release_memory(*modules_or_optimizers: object) -> None:
    """Drop gradients, collect garbage and return cached blocks to the driver."""
    for obj in modules_or_optimizers:
        zero = getattr(obj, "zero_grad", None)
        if callable(zero):
            zero(set_to_none=True)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def inject_oom_at(micro_batch: int, times: int = 1) -> OOMInjector:
    """An injector that fails a forward pass ``times`` times while the micro-batch is
    ``>= micro_batch``: the test double for running out of GPU memory."""
    remaining = [times]

    def injector(step: int, micro: int) -> bool:
        if micro >= micro_batch and remaining[0] > 0:
            remaining[0] -= 1
            return True
        return False

    return injector


def memory_budget(limit_bytes: int | None, device: torch.device) -> int | None:
    """The bytes a micro-batch may use on each GPU: ``limit_bytes`` (DANLU_GPU_MEMORY_LIMIT)
    when set, else a CUDA device's total memory; None on CPU without a limit."""
    if limit_bytes is not None:
        return limit_bytes
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(device).total_memory)
    return None
