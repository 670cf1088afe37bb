"""Learning-rate control around any torch scheduler.

torch's own schedulers do the schedules (``StepLR``, ``ExponentialLR``, ``CosineAnnealingLR``,
``PolynomialLR``, ``CyclicLR``, ``ReduceLROnPlateau``, ...). :class:`LRController` composes with
any of them, as multipliers on the LR the scheduler chose:

* linear warmup: ``min(1, (t + 1) / warmup_steps)`` (seed 000 section 5.2);
* gradient-norm-adaptive scaling: ``tau / max(||g||, tau)`` (seed 000 section 5.3);
* batch co-scaling (:mod:`danlu.train.scaling`) when the batch size changes;
* rollback decay: after an anomaly rollback the LR is multiplied by a factor < 1.

The scheduler keeps seeing its own LR (the multipliers are removed before it steps), so chainable
schedulers never compound the multipliers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NoReturn

import torch

from danlu.core.errors import ConfigError
from danlu.train.state import stored_count, stored_rate


def _step_count(scheduler: Any) -> Any:
    """A torch scheduler's step count (``last_epoch``; ``ReduceLROnPlateau``'s too), None
    for a scheduler without one."""
    return getattr(scheduler, "last_epoch", None)


class LRController:
    """Owns the optimizer LRs: scheduler LR x warmup x scale x decay x grad-norm factor."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        scheduler: Any | None = None,
        *,
        warmup_steps: int = 0,
        grad_norm_tau: float | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.warmup_steps = max(0, int(warmup_steps))
        self.grad_norm_tau = grad_norm_tau
        self.scale = 1.0
        self.decay = 1.0
        self.steps = 0
        self._inner = [float(g["lr"]) for g in optimizer.param_groups]
        self.plateau = isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        """True when the scheduler is ``ReduceLROnPlateau`` (stepped with a metric)."""
        self._scheduler_count: Any = _step_count(scheduler)
        """The scheduler's step count (``last_epoch``) after this controller stepped it
        last; None when unknown (a scheduler without one, or its state just loaded)."""
        self._apply(1.0)

    @property
    def uses_grad_norm(self) -> bool:
        """True when the LR depends on the gradient norm."""
        return self.grad_norm_tau is not None

    def warmup_factor(self) -> float:
        """The warmup multiplier at the current step."""
        if self.warmup_steps <= 0:
            return 1.0
        return min(1.0, (self.steps + 1) / self.warmup_steps)

    def grad_norm_factor(self, grad_norm: float | None) -> float:
        """``tau / max(||g||, tau)``, or 1 when disabled or the norm is unknown/non-finite."""
        tau = self.grad_norm_tau
        if tau is None or grad_norm is None or not math.isfinite(grad_norm):
            return 1.0
        return tau / max(grad_norm, tau)

    def _apply(self, extra: float) -> None:
        if len(self._inner) < len(self.optimizer.param_groups):
            self._adopt_new_groups()
        f = self.warmup_factor() * self.scale * self.decay * extra
        for g, lr in zip(self.optimizer.param_groups, self._inner, strict=True):
            g["lr"] = lr * f

    def before_step(self, grad_norm: float | None = None) -> None:
        """Set the effective LRs for the optimizer step about to happen."""
        if self.grad_norm_tau is not None:
            self._apply(self.grad_norm_factor(grad_norm))

    def after_step(self, stepped: bool = True) -> None:
        """Advance the scheduler (not ``ReduceLROnPlateau``: see :meth:`plateau_step`) and
        the warmup after an optimizer step.

        ``stepped`` is False when the optimizer did not update the parameters (the fp16
        GradScaler found NaN/Inf gradients and skipped its step, or an anomaly skipped it):
        then neither moves, so the schedule counts updates as an unscaled run does and an
        exact resume stays exact. Before, the scheduler stepped anyway, ran one step ahead
        for every skipped update, and torch warned "``lr_scheduler.step()`` before
        ``optimizer.step()``" when the first step was skipped."""
        if not stepped:
            if self.grad_norm_tau is not None:
                self._apply(1.0)  # drop this step's norm factor, as a step would
            return
        self.steps += 1
        if self.scheduler is None and self.grad_norm_tau is None and self.steps > self.warmup_steps:
            return  # no schedule, no per-step factor, warmup over: the LRs set last still hold
        if self.plateau:
            expected = self._scheduler_count
            if expected is not None and _step_count(self.scheduler) != expected:
                self._refuse_stepped_outside(expected)
            self._apply(1.0)
            return
        self._with_inner(lambda s: s.step())

    def plateau_step(self, metric: float) -> None:
        """Feed a validation metric to ``ReduceLROnPlateau`` (call once per epoch)."""
        if self.plateau:
            self._with_inner(lambda s: s.step(metric))

    def _with_inner(self, fn: Any) -> None:
        if fn is not None and self.scheduler is not None:
            expected = self._scheduler_count
            if expected is not None and _step_count(self.scheduler) != expected:
                self._refuse_stepped_outside(expected)
            if len(self._inner) < len(self.optimizer.param_groups):
                self._adopt_new_groups()
            for g, lr in zip(self.optimizer.param_groups, self._inner, strict=True):
                g["lr"] = lr
            fn(self.scheduler)
            self._inner = [float(g["lr"]) for g in self.optimizer.param_groups]
            self._scheduler_count = _step_count(self.scheduler)
        self._apply(1.0)

    def _adopt_new_groups(self) -> None:
        """Take the LR of parameter groups added to the optimizer after this controller was
        made (``optimizer.add_param_group``, unfreezing a part) as their own LR, which the
        multipliers scale from now on (before, every later step failed with a bare
        ``ValueError`` of ``zip``)."""
        groups = self.optimizer.param_groups
        self._inner += [float(g["lr"]) for g in groups[len(self._inner) :]]

    def _refuse_stepped_outside(self, expected: int) -> NoReturn:
        """Refuse a scheduler that was stepped outside this controller (the script's own
        ``scheduler.step()``, once per epoch or after ``ctx.step``; ``expected`` is its
        ``last_epoch`` as this controller left it): ``ctx.step`` steps it once per optimizer
        step, so each such call stepped it once more and the schedule ran ahead, silently
        (a per-epoch ``StepLR`` decayed after every step). A ``ReduceLROnPlateau`` stepped
        by the script lost its reductions: the controller's next step set the LRs again."""
        name = type(self.scheduler).__name__
        if self.plateau:
            why = "ctx.step sets the LRs again, undoing its reductions"
            fix = "feed it with ctx.lr.plateau_step(metric) once per epoch instead"
        else:
            why = "ctx.step steps it once per optimizer step, so it ran ahead"
            fix = (
                "remove the script's scheduler.step(); for a schedule in epochs, give its "
                "period in optimizer steps (StepLR(step_size=epochs * steps_per_epoch))"
            )
        raise ConfigError(
            f"the scheduler passed to danlu.train.init ({name}) was stepped outside "
            f"danlu (its last_epoch is {_step_count(self.scheduler)}, danlu left it at "
            f"{expected}): {why}; {fix}"
        )

    def set_scale(self, scale: float) -> None:
        """Batch co-scaling multiplier (from :func:`danlu.train.scaling.lr_factor`)."""
        self.scale = float(scale)
        self._apply(1.0)

    def reduce(self, factor: float) -> None:
        """Multiply the LR by ``factor`` from now on (anomaly rollback)."""
        self.decay *= float(factor)
        self._apply(1.0)

    @property
    def lr(self) -> float:
        """The first param group's effective LR."""
        return float(self.optimizer.param_groups[0]["lr"])

    def state_dict(self) -> dict[str, Any]:
        """Resumable state (the scheduler's own state is saved with the scheduler)."""
        return {
            "steps": self.steps,
            "scale": self.scale,
            "decay": self.decay,
            "inner": list(self._inner),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output: :meth:`parse_state_dict`'s checks, then the
        load. Nothing is changed when it raises."""
        self.parse_state_dict(state)()

    def parse_state_dict(self, state: dict[str, Any]) -> Callable[[], None]:
        """Check :meth:`state_dict` output and return the function that loads it (sets the
        multipliers and the scheduler's LRs and applies them to the optimizer's parameter
        groups), which cannot fail; nothing is changed until it is called. ``ValueError``
        names a value no run writes (a damaged checkpoint): a step count that is not a
        whole number >= 0, a multiplier or LR that is NaN, infinite or negative (they
        became the optimizer's LR unseen: a NaN scale trained every later step at a NaN
        LR), or another number of LRs than the optimizer has parameter groups (the load
        raised only after it had set the multipliers)."""
        steps = stored_count(state["steps"], "the LR state's steps")
        scale = stored_rate(state["scale"], "the LR state's scale")
        decay = stored_rate(state["decay"], "the LR state's decay")
        inner = [stored_rate(v, "the LR state's inner") for v in state["inner"]]
        groups = len(self.optimizer.param_groups)
        if len(inner) != groups:
            raise ValueError(
                f"the LR state's inner holds {len(inner)} LRs for {groups} parameter groups"
            )

        def load() -> None:
            self.steps, self.scale, self.decay, self._inner = steps, scale, decay, inner
            self._scheduler_count = None  # the scheduler's state is loaded with it
            self._apply(1.0)

        return load
