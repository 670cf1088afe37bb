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
from collections.abc import Callable
from numbers import Integral, Real

import numpy as np

from danlu.core.errors import ConfigError, DanluError
from danlu.train.state import stored_count

ACTIONS = ("skip", "rollback", "stop", "warn")
KINDS = ("nonfinite_loss", "nonfinite_grad", "zero_grad", "grad_spike", "loss_spike")
"""The kinds :meth:`AnomalyDetector.check` finds, most severe first (the order in which a
distributed run reconciles its ranks' verdicts)."""
MIN_HISTORY = 20
"""Healthy values a window holds before it judges spikes (the default ``min_history``, and
the least ``anomaly_window`` that :func:`danlu.train.init` takes)."""
_isfinite = math.isfinite


class TrainingAnomalyError(DanluError):
    """Training hit an anomaly (NaN loss, exploding gradients, ...) and was told to stop."""


class _Window:
    """The last ``size`` healthy values and ``limit``, the spike threshold ``mu + k * sigma``
    over them: infinite until ``min_history`` values were seen. The limit is updated as each
    value enters (the check of the next step only compares with it).

    The limit is a function of the values in the window alone: the sums of the values and of
    their squares are kept *exactly*, as integers in units of ``2 ** -shift`` (every finite
    float is an integer multiple of a power of two), so a value that leaves is subtracted
    without a trace, and the mean and variance are correctly rounded from them. Float running
    sums kept the rounding error of large early values (a loss falling from 1e6 to 1e-2 left
    a limit off by orders of magnitude), and a resumed run, which rebuilds the sums from the
    stored values, judged steps otherwise. Cheaper than summing the window again on each
    step (``math.fsum`` of 100 values): one step's update is a few small-integer operations.
    ``shift`` only grows (to the finest unit a value needed); the result does not depend on
    it."""

    __slots__ = ("k", "limit", "min_history", "shift", "size", "total", "total_sq", "values")

    def __init__(self, size: int, k: float, min_history: int) -> None:
        self.size = size
        self.k = k
        self.min_history = min_history
        self.values: deque[float] = deque()
        self.total = 0
        """The sum of the values, in units of ``2 ** -shift`` (exact)."""
        self.total_sq = 0
        """The sum of their squares, in units of ``2 ** (-2 * shift)`` (exact)."""
        self.shift = 0
        self.limit = math.inf

    def add(self, v: float) -> None:
        values = self.values
        values.append(v)
        num, den = v.as_integer_ratio()  # v = num / 2**e
        e = den.bit_length() - 1
        shift = self.shift
        if e > shift:  # a finer unit: rescale the sums (exact)
            self.total <<= e - shift
            self.total_sq <<= 2 * (e - shift)
            self.shift = shift = e
        x = num << (shift - e)
        total = self.total + x
        total_sq = self.total_sq + x * x
        n = len(values)
        if n > self.size:
            num, den = values.popleft().as_integer_ratio()
            x = num << (shift - den.bit_length() + 1)
            total -= x
            total_sq -= x * x
            n -= 1
        self.total, self.total_sq = total, total_sq
        if n >= self.min_history:
            try:  # int / int is correctly rounded; n * total_sq - total**2 >= 0 exactly
                mu = total / (n << shift)
                var = (n * total_sq - total * total) / ((n * n) << (2 * shift))
                self.limit = mu + self.k * math.sqrt(var)
            except OverflowError:  # beyond the float range: nothing is a spike
                self.limit = math.inf


class AnomalyDetector:
    """Checks each step's loss and gradient norm; see the module docstring."""

    def __init__(
        self,
        action: str = "skip",
        *,
        window: int = 100,
        k: float = 6.0,
        min_history: int = MIN_HISTORY,
        check_loss_spikes: bool = True,
        rollback_lr_factor: float = 0.5,
    ) -> None:
        # case and surrounding blanks do not matter ("Skip"), as for the precision's name
        name = action.strip().lower() if isinstance(action, str) else None
        if name is None or name not in ACTIONS:
            raise ConfigError(
                f"anomaly action must be one of {', '.join(ACTIONS)} (in any case); got {action!r}"
            )
        for count_name, count in (("window", window), ("min_history", min_history)):
            if isinstance(count, bool) or not isinstance(count, Integral) or count < 1:
                raise ConfigError(f"anomaly {count_name} must be an integer >= 1; got {count!r}")
        for rate_name, rate in (("k", k), ("rollback_lr_factor", rollback_lr_factor)):
            # a NaN k left every limit NaN (no spike ever found); a NaN or negative factor
            # became the LR of every step after a rollback
            if isinstance(rate, bool) or not isinstance(rate, Real) or not 0 < rate < math.inf:
                raise ConfigError(
                    f"anomaly {rate_name} must be a positive, finite number; got {rate!r}"
                )
        # a switch is a bool (numpy's too) or 0/1: "no" or "False" is true, and turned it on
        switch = isinstance(check_loss_spikes, bool | np.bool_) or (
            isinstance(check_loss_spikes, Integral) and check_loss_spikes in (0, 1)
        )
        if not switch:
            raise ConfigError(
                f"anomaly check_loss_spikes must be True or False; got {check_loss_spikes!r}"
            )
        if window < min_history:
            raise ConfigError(
                f"the anomaly window ({window}) must hold at least min_history ({min_history}) "
                "values, else the spike limit is never set and spikes are never found; "
                "pass a larger window or a smaller min_history"
            )
        self.action = name
        self.k = k
        self.min_history = min_history
        self.check_loss_spikes = bool(check_loss_spikes)
        self.rollback_lr_factor = rollback_lr_factor
        self._grad = _Window(window, k, min_history)
        self._loss = _Window(window, k, min_history)
        self.counts: dict[str, int] = {}
        self.total = 0
        """Anomalies seen so far (the sum of :attr:`counts`)."""

    def check(self, loss: float, grad_norm: float | None) -> str | None:
        """The anomaly kind of this step (``"nonfinite_loss"``, ``"nonfinite_grad"``,
        ``"zero_grad"``, ``"grad_spike"``, ``"loss_spike"``) or None when healthy.

        Healthy values enter the statistics; anomalous ones never do.
        """
        isfinite = _isfinite
        if not isfinite(loss):
            kind = "nonfinite_loss"
        elif grad_norm is None:  # a step without the norm: only the loss is checked
            if self.check_loss_spikes and loss > self._loss.limit:
                kind = "loss_spike"
            else:
                self._loss.add(loss)
                return None
        elif not isfinite(grad_norm):
            kind = "nonfinite_grad"
        elif grad_norm == 0.0:
            kind = "zero_grad"
        elif grad_norm > self._grad.limit:
            kind = "grad_spike"
        elif self.check_loss_spikes and loss > self._loss.limit:
            kind = "loss_spike"
        else:  # healthy
            self._loss.add(loss)
            self._grad.add(grad_norm)
            return None
        self.count(kind)
        return kind

    def count(self, kind: str) -> None:
        """Count one anomaly of ``kind`` (also those found outside :meth:`check`)."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.total += 1

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
        """Restore :meth:`state_dict` output: :meth:`parse_state_dict`'s checks, then the
        load. Nothing is changed when it raises."""
        self.parse_state_dict(state)()

    def parse_state_dict(self, state: dict[str, object]) -> Callable[[], None]:
        """Check :meth:`state_dict` output and return the function that loads it (the counts
        and both statistics windows), which cannot fail; nothing is changed until it is
        called. A value that is not finite (a damaged checkpoint: :meth:`check` never lets
        one in) is left out; an infinity raised a raw ``OverflowError`` and a NaN a
        ``ValueError``. A count that is no whole number >= 0 (a bool, ``2.5``, a negative
        one, ``"abc"``: a damaged checkpoint) is a ``ValueError`` naming its kind; ``int()``
        took ``true`` as 1 and a negative count lowered the total of anomalies reported. A
        window value that is no number is a ``ValueError`` or ``TypeError`` (the load raised
        it once it had set the counts)."""
        counts = {
            str(kind): stored_count(count, f"the anomaly state's count of {kind}")
            for kind, count in dict(state.get("counts", {})).items()  # type: ignore[call-overload]
        }
        grad = _Window(self._grad.size, self.k, self.min_history)
        loss = _Window(self._loss.size, self.k, self.min_history)
        for window, key in ((grad, "grad"), (loss, "loss")):
            for v in state.get(key, []):  # type: ignore[attr-defined]
                value = float(v)
                if _isfinite(value):
                    window.add(value)

        def load() -> None:
            self.counts, self.total = counts, sum(counts.values())
            self._grad, self._loss = grad, loss

        return load
