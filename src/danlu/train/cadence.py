"""How often a step computes the gradient norm: a fixed cadence, or one sized to a cost budget.

The norm (a metric, and what anomaly detection checks for NaN/Inf gradients and spikes)
reads every gradient once more. On a GPU that is one fused kernel whose result comes to the
host with the loss; on a CPU it is a memory-bound pass that, for a model doing little
arithmetic per parameter (a wide MLP), costs a few percent of the step.

``"auto"`` (:class:`NormCadence`'s default in ``danlu.train.init``) keeps that cost inside a
budget:

- on a GPU, wherever clipping or norm-adaptive LR need the norm, and for models with fewer
  than :data:`SMALL_GRADIENTS` gradient elements (their norm costs microseconds; timing it
  would only let the machine's noise pick the cadence), it is every step;
- on a CPU the norm is computed on every step while it is measured: the first step is
  skipped (allocator warm-up), the next :data:`CALIBRATION_STEPS` are timed. Then the cadence
  is fixed once: every step when the median norm costs at most
  ``max(FLOOR_S, BUDGET x step)`` (the step without the norm), else every ``N``-th step
  with ``N = ceil(norm / (BUDGET x step))``, at most :data:`MAX_EVERY`.

The chosen cadence is part of the checkpoint, so a resumed run keeps it. Being measured, it
may differ between two fresh runs of the same job: the steps whose gradients are checked then
differ, which matters only where a gradient spike is judged. Pass an integer for a cadence
that does not depend on timing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any, Literal

from danlu.core.errors import DanluError

BUDGET = 0.001
"""The norm's share of the step ``"auto"`` allows (a tenth of a percent)."""

FLOOR_S = 100e-6
"""A norm this cheap (seconds) runs every step whatever the step costs: for small models the
budget would otherwise drop per-step gradient checks to save microseconds."""

SMALL_GRADIENTS = 1 << 18
"""Models with fewer gradient elements (1 MiB in fp32) than this are never measured."""

CALIBRATION_STEPS = 3
"""Steps timed (after one warm-up step) before ``"auto"`` fixes the cadence."""

MAX_EVERY = 64
"""The sparsest cadence ``"auto"`` picks."""

NormEvery = int | Literal["auto"]


class NormCadence:
    """Whether a step computes the gradient norm; see the module docstring.

    :meth:`due` answers for a step; :meth:`observe` takes a measured step while
    :attr:`calibrating` and returns the cadence once it is decided (the caller may agree on it
    across ranks and :meth:`fix` it).
    """

    def __init__(
        self, every: NormEvery, *, measurable: bool = True, elements: int | None = None
    ) -> None:
        """``every``: a cadence >= 1, or ``"auto"``; ``measurable``: False where the norm's
        cost cannot be timed on the host (a GPU); ``elements``: the gradient elements the
        norm reads (None: unknown). ``"auto"`` means every step when not measurable or below
        :data:`SMALL_GRADIENTS`."""
        check_norm_every(every)
        self.auto = every == "auto"
        self.every = 1 if every == "auto" else every
        small = elements is not None and elements < SMALL_GRADIENTS
        self.calibrating = self.auto and measurable and not small
        self._warmup = 1
        self._norms: list[float] = []
        self._steps: list[float] = []

    def due(self, step: int) -> bool:
        """Whether step ``step`` (0-based, counted over the whole run) computes the norm.

        ``StepEngine.step`` evaluates the same condition inline (it runs on every step); a
        test checks that the two agree."""
        return self.calibrating or step % self.every == 0

    def observe(self, norm_s: float, step_s: float) -> int | None:
        """One calibration step: the norm took ``norm_s`` of the step's ``step_s`` seconds.
        Returns the decided cadence after the last calibration step, else None."""
        if not self.calibrating:
            return None
        if self._warmup > 0:
            self._warmup -= 1
            return None
        self._norms.append(norm_s)
        self._steps.append(max(step_s - norm_s, 0.0))
        if len(self._norms) < CALIBRATION_STEPS:
            return None
        return decide(statistics.median(self._norms), statistics.median(self._steps))

    def fix(self, every: int) -> None:
        """End calibration with cadence ``every``."""
        self.every = max(1, int(every))
        self.calibrating = False
        self._norms.clear()
        self._steps.clear()

    def state_dict(self) -> dict[str, Any]:
        """The decided cadence of an ``"auto"`` run (None while calibrating or fixed by the
        user)."""
        return {"every": self.every if self.auto and not self.calibrating else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Keep a resumed ``"auto"`` run's cadence (a user's integer wins)."""
        self.parse_state_dict(state)()

    def parse_state_dict(self, state: dict[str, Any]) -> Callable[[], None]:
        """The function that loads :meth:`state_dict` output (see :meth:`load_state_dict`),
        which cannot fail; nothing is changed until it is called. A cadence that is no whole
        number >= 1 is left out."""
        every = state.get("every")
        if self.auto and isinstance(every, int) and every >= 1:
            return lambda: self.fix(every)
        return lambda: None


def check_norm_every(every: object) -> None:
    """Raise a clear error unless ``every`` is a cadence >= 1 or ``"auto"``."""
    if every != "auto" and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
        raise DanluError(
            f"grad_norm_every must be >= 1 or 'auto' (got {every!r}); "
            "use compute_grad_norm=False to skip the norm altogether"
        )


def decide(norm_s: float, step_s: float) -> int:
    """The cadence for a norm costing ``norm_s`` next to a step of ``step_s`` seconds (without
    the norm); see the module docstring."""
    allowed = BUDGET * step_s
    if norm_s <= max(FLOOR_S, allowed):
        return 1
    if allowed <= 0.0:
        return MAX_EVERY
    return min(MAX_EVERY, math.ceil(norm_s / allowed))
