"""Training anomaly detection: non-finite loss or gradients, gradient-norm and loss spikes.

A value is a *spike* when it exceeds ``mu + k * sigma`` of the last ``window`` healthy values
(after ``min_history`` of them were seen). A zero gradient norm (a dead network or a detached
loss) is an anomaly too. The action is chosen per run: ``"skip"`` the optimizer step,
``"rollback"`` to the last good checkpoint with the LR multiplied by ``rollback_lr_factor``, or
``"stop"`` with a :class:`TrainingAnomalyError` naming the step and the reason. ``"warn"`` only
counts. Counts by kind are reported with the metrics.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from danlu.core.errors import ConfigError, DanluError

ACTIONS = ("skip", "rollback", "stop", "warn")


class TrainingAnomalyError(DanluError):
    """Training hit an anomaly (NaN loss, exploding gradients, ...) and was told to stop."""


@dataclass
class _Window:
    size: int
    values: deque[float] = field(default_factory=deque)
    total: float = 0.0
    total_sq: float = 0.0

    def add(self, v: float) -> None:
        self.values.append(v)
        self.total += v
        self.total_sq += v * v
        if len(self.values) > self.size:
            old = self.values.popleft()
            self.total -= old
            self.total_sq -= old * old

    def threshold(self, k: float) -> float:
        n = len(self.values)
        mu = self.total / n
        var = max(0.0, self.total_sq / n - mu * mu)
        return mu + k * math.sqrt(var)


class AnomalyDetector:
    """Checks each step's loss and gradient norm; see the module docstring."""

    def __init__(
        self,
        action: str = "skip",
        *,
        window: int = 100,
        k: float = 6.0,
        min_history: int = 20,
        check_loss_spikes: bool = True,
        rollback_lr_factor: float = 0.5,
    ) -> None:
        if action not in ACTIONS:
            raise ConfigError(f"anomaly action must be one of {', '.join(ACTIONS)}; got {action!r}")
        self.action = action
        self.k = k
        self.min_history = min_history
        self.check_loss_spikes = check_loss_spikes
        self.rollback_lr_factor = rollback_lr_factor
        self._grad = _Window(window)
        self._loss = _Window(window)
        self.counts: dict[str, int] = {}

    def check(self, loss: float, grad_norm: float | None) -> str | None:
        """The anomaly kind of this step (``"nonfinite_loss"``, ``"nonfinite_grad"``,
        ``"zero_grad"``, ``"grad_spike"``, ``"loss_spike"``) or None when healthy.

        Healthy values enter the statistics; anomalous ones never do.
        """
        kind = self._classify(loss, grad_norm)
        if kind is None:
            self._loss.add(loss)
            if grad_norm is not None:
                self._grad.add(grad_norm)
        else:
            self.count(kind)
        return kind

    def count(self, kind: str) -> None:
        """Count one anomaly of ``kind`` (also those found outside :meth:`check`)."""
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def _classify(self, loss: float, grad_norm: float | None) -> str | None:
        if not math.isfinite(loss):
            return "nonfinite_loss"
        if grad_norm is not None:
            if not math.isfinite(grad_norm):
                return "nonfinite_grad"
            if grad_norm == 0.0:
                return "zero_grad"
            if len(self._grad.values) >= self.min_history and grad_norm > self._grad.threshold(
                self.k
            ):
                return "grad_spike"
        if (
            self.check_loss_spikes
            and len(self._loss.values) >= self.min_history
            and loss > self._loss.threshold(self.k)
        ):
            return "loss_spike"
        return None

    @property
    def total(self) -> int:
        """Anomalies seen so far."""
        return sum(self.counts.values())

    def raise_for(self, kind: str, step: int, loss: float, grad_norm: float | None) -> None:
        """Raise the clear error of the ``"stop"`` action."""
        raise TrainingAnomalyError(
            f"training anomaly {kind!r} at step {step}: loss={loss!r}, grad_norm={grad_norm!r}; "
            "lower the learning rate, enable gradient clipping or check the data of this step"
        )

    def state_dict(self) -> dict[str, object]:
        """Resumable state (counts and the statistics windows)."""
        return {
            "counts": dict(self.counts),
            "grad": list(self._grad.values),
            "loss": list(self._loss.values),
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict` output."""
        counts = state.get("counts", {})
        self.counts = {str(k): int(v) for k, v in dict(counts).items()}  # type: ignore[call-overload]
        self._grad = _Window(self._grad.size)
        self._loss = _Window(self._loss.size)
        for v in state.get("grad", []):  # type: ignore[attr-defined]
            self._grad.add(float(v))
        for v in state.get("loss", []):  # type: ignore[attr-defined]
            self._loss.add(float(v))
