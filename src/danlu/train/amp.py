"""Mixed precision: ``torch.autocast`` plus ``torch.amp.GradScaler`` (dynamic loss scaling).

Only what torch lacks is written here: choosing the dtype from a short name, a no-op context in
full precision (no autocast overhead), and counting the steps the scaler skipped.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from danlu.core.errors import ConfigError
from danlu.estimate.memory.trace_result import PRECISION_SPELLINGS

_NO_AUTOCAST = contextlib.nullcontext()

_DTYPES = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}
"""The autocast dtype of each precision (by the name :data:`PRECISION_SPELLINGS` gives it)."""

_SPELLINGS = ", ".join(PRECISION_SPELLINGS)
"""The accepted precision names (the memory estimator's table), for the error that refuses
another."""


class Precision:
    """Autocast and loss scaling for one device.

    ``precision`` is ``"fp32"`` (default), ``"fp16"`` (autocast to float16 with a GradScaler)
    or ``"bf16"`` (autocast to bfloat16, no scaler needed); ``"32"`` and ``"16"`` are
    ``"fp32"`` and ``"fp16"``. Case and surrounding blanks do not matter (``"BF16"``);
    :attr:`name` is the lower-case spelling.
    """

    def __init__(
        self,
        precision: str = "fp32",
        device: torch.device | str = "cpu",
        *,
        init_scale: float = 2.0**16,
    ) -> None:
        name = precision.strip().lower() if isinstance(precision, str) else None
        if name is None or name not in PRECISION_SPELLINGS:
            raise ConfigError(
                f"precision must be one of {_SPELLINGS} (in any case); got {precision!r}"
            )
        self.name = name
        self.dtype = _DTYPES[PRECISION_SPELLINGS[name]]
        self.device_type = torch.device(device).type
        self.scaler = torch.amp.GradScaler(
            self.device_type, init_scale=init_scale, enabled=self.dtype is torch.float16
        )
        self.skipped_steps = 0
        self.scaling: bool = self.scaler.is_enabled()
        """True when a GradScaler is active (fp16); fixed at construction, as the scaler's
        own switch is (read on every step, so a plain attribute)."""

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast region for the forward pass (a no-op in fp32)."""
        if self.dtype is None:
            return _NO_AUTOCAST
        return torch.autocast(self.device_type, dtype=self.dtype)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to call ``backward()`` on."""
        return self.scaler.scale(loss) if self.scaling else loss

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients back to their true scale (before clipping or norm checks)."""
        if self.scaling:
            self.scaler.unscale_(optimizer)

    def forget_unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Forget that :meth:`unscale` ran on ``optimizer`` in this step: the step is being
        retried from its forward pass (an out-of-memory error after the unscale), and the
        scaler refuses a second ``unscale_`` before its ``update()``. ``update()`` itself
        would also move the loss scale, as if the abandoned attempt had been a step; the
        scaler keeps this per-optimizer record in ``_per_optimizer_states`` (the one thing
        ``update()`` resets besides the scale), which has no public reset."""
        if self.scaling:
            self.scaler._per_optimizer_states.pop(id(optimizer), None)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Optimizer step through the scaler; returns False when the scaler skipped it."""
        if not self.scaling:
            optimizer.step()
            return True
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        skipped = self.scaler.get_scale() < before
        if skipped:
            self.skipped_steps += 1
        return not skipped

    @property
    def loss_scale(self) -> float:
        """The current loss scale (1.0 without a scaler)."""
        return float(self.scaler.get_scale()) if self.scaling else 1.0
