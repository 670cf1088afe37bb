"""Learning-rate co-scaling with the batch size (seed 000 section 4.3; AdaScale).

With ``k = B / B0`` (new batch over the batch the base learning rate ``eta0`` was tuned
for):

* linear (Goyal et al. 2017, seed 000 4.3):        ``eta = eta0 * k``
* square root (Krizhevsky 2014, seed 000 4.3):     ``eta = eta0 * sqrt(k)``
* progressive with factor ``c`` (seed 000 4.3):    ``eta = eta0 * min(k, c * sqrt(k))``
  -- linear while ``k <= c^2``, then square root, continuous at ``k = c^2``
* AdaScale (Johnson et al., "AdaScale SGD", ICML 2020): ``eta = eta0 * gain(B)`` with
  ``gain = (var + sqr) / (var / k + sqr)`` from the gradient statistics
  (:func:`danlu.estimate.goodput.gain`); between 1 (no noise) and ``k`` (pure noise).

The rules are plain functions; :func:`scale_lr` dispatches by name through a small
registry whose lookup errors list the valid names.
"""

from __future__ import annotations

import math
from enum import StrEnum

from danlu.core.errors import SpecError, UnknownNameError
from danlu.core.values import check_positive_int, quoted
from danlu.estimate.checks import as_float, check_finite, is_real_number
from danlu.estimate.goodput import GradientStats, gain

__all__ = [
    "LRScaling",
    "adascale_lr",
    "linear_lr",
    "progressive_lr",
    "rule_names",
    "scale_lr",
    "sqrt_lr",
]


class LRScaling(StrEnum):
    """The learning-rate scaling rules by name."""

    LINEAR = "linear"
    SQRT = "sqrt"
    PROGRESSIVE = "progressive"
    ADASCALE = "adascale"


_ALIASES = {"square_root": LRScaling.SQRT, "square-root": LRScaling.SQRT}


def _ratio(base_lr: float, batch_size: float, base_batch_size: float) -> float:
    """``batch_size / base_batch_size``; :class:`SpecError` naming the argument unless all
    three are positive finite numbers (a bool is not one: ``True`` scaled as a batch of 1)."""
    for name, value in (
        ("base_lr", base_lr),
        ("base_batch_size", base_batch_size),
        ("batch_size", batch_size),
    ):
        # as_float: an int beyond float range (10**400) raised OverflowError in isfinite
        if not (is_real_number(value) and math.isfinite(as_float(value)) and value > 0):
            raise SpecError(name, f"must be a positive number, got {quoted(value)}")
    ratio = batch_size / base_batch_size
    if not (math.isfinite(ratio) and ratio > 0):  # 1e308 / 1e-10 is inf, 1e-300 / 1e100 is 0
        raise SpecError(
            "batch_size",
            f"batch_size / base_batch_size = {quoted(batch_size)} / {quoted(base_batch_size)} "
            "is beyond a float's range; give batch sizes within a few orders of magnitude",
        )
    return ratio


def _scaled(lr: float, base_lr: float, batch_size: float, base_batch_size: float) -> float:
    """A rule's learning rate ``lr``; :class:`SpecError` on ``base_lr`` unless it is a
    positive finite number (``base_lr=1e300`` scaled by 1e10 was an infinite learning rate,
    ``1e-300`` by ``1e-200`` one of 0, returned as answers)."""
    if not (math.isfinite(lr) and lr > 0):
        raise SpecError(
            "base_lr",
            f"{quoted(base_lr)} scaled from batch {quoted(base_batch_size)} to "
            f"{quoted(batch_size)} gives a learning rate of {lr!r}, no positive finite number: "
            "give a base learning rate within a float's range",
        )
    return lr


def linear_lr(base_lr: float, batch_size: float, base_batch_size: float) -> float:
    """Linear scaling rule: ``eta0 * B / B0`` (seed 000 section 4.3). Raises
    :class:`SpecError` naming the argument unless the three are positive finite numbers and
    the answer is one too (so do the other rules)."""
    lr = base_lr * _ratio(base_lr, batch_size, base_batch_size)
    return _scaled(lr, base_lr, batch_size, base_batch_size)


def sqrt_lr(base_lr: float, batch_size: float, base_batch_size: float) -> float:
    """Square-root scaling rule: ``eta0 * sqrt(B / B0)`` (seed 000 section 4.3)."""
    lr = base_lr * math.sqrt(_ratio(base_lr, batch_size, base_batch_size))
    return _scaled(lr, base_lr, batch_size, base_batch_size)


def progressive_lr(base_lr: float, batch_size: float, base_batch_size: float, c: float) -> float:
    """Progressive rule: ``eta0 * min(B / B0, c * sqrt(B / B0))`` (seed 000 section 4.3).

    ``c > 0`` is the adjustment factor: the rule is linear up to ``B / B0 = c^2`` and
    square-root beyond. Raises :class:`SpecError` on ``c`` unless it is a positive finite
    number (a string or ``None`` raised a bare TypeError, ``True`` counted as 1).
    """
    k = _ratio(base_lr, batch_size, base_batch_size)
    factor = check_finite("c", c, positive=True, what="a progressive factor")
    scale = min(k, factor * math.sqrt(k))
    if not scale > 0:  # a c of 5e-324 made the learning rate (nearly) 0
        raise SpecError("c", f"{quoted(c)} scales the learning rate to 0; give a larger c")
    return _scaled(base_lr * scale, base_lr, batch_size, base_batch_size)


def adascale_lr(
    base_lr: float, batch_size: float, base_batch_size: int, grad_stats: GradientStats
) -> float:
    """AdaScale: ``eta0 * gain(B)``, ``gain = (var + sqr) / (var / (B / B0) + sqr)``.

    ``grad_stats`` are measured at ``base_batch_size`` (Johnson et al. 2020; Pollux uses
    the same gain for its learning-rate scaling), so unlike the ratio rules it needs a
    whole ``base_batch_size``: :class:`SpecError` on ``base_batch_size`` otherwise.
    """
    _ratio(base_lr, batch_size, base_batch_size)
    # Checked here so the error names the caller's argument, not gain()'s init_batch_size.
    check_positive_int("base_batch_size", base_batch_size)
    if not isinstance(grad_stats, GradientStats):  # a (sqr, var) tuple: AttributeError
        raise SpecError("grad_stats", f"must be GradientStats(sqr, var), got {quoted(grad_stats)}")
    lr = base_lr * gain(grad_stats, batch_size, base_batch_size)
    return _scaled(lr, base_lr, batch_size, base_batch_size)


def rule_names() -> list[str]:
    """The valid rule names, sorted."""
    return sorted(r.value for r in LRScaling)


def _rule(rule: str | LRScaling) -> LRScaling:
    if isinstance(rule, LRScaling):
        return rule
    key = str(rule).strip().lower()
    if key in _ALIASES:
        return _ALIASES[key]
    try:
        return LRScaling(key)
    except ValueError:
        raise UnknownNameError("lr scaling rule", str(rule), rule_names()) from None


def scale_lr(
    rule: str | LRScaling,
    base_lr: float,
    batch_size: float,
    base_batch_size: int,
    *,
    c: float | None = None,
    grad_stats: GradientStats | None = None,
) -> float:
    """Scale ``base_lr`` from ``base_batch_size`` to ``batch_size`` by the named rule.

    ``rule`` is one of :func:`rule_names` (``square_root`` is accepted for ``sqrt``);
    ``progressive`` needs ``c``, ``adascale`` needs ``grad_stats``. Raises
    :class:`UnknownNameError` listing the valid names, or :class:`SpecError` for a missing
    or invalid argument.
    """
    which = _rule(rule)
    if which is LRScaling.LINEAR:
        return linear_lr(base_lr, batch_size, base_batch_size)
    if which is LRScaling.SQRT:
        return sqrt_lr(base_lr, batch_size, base_batch_size)
    if which is LRScaling.PROGRESSIVE:
        if c is None:
            raise SpecError(
                "c",
                "the progressive rule needs its factor c (linear up to "
                "B/B0 = c^2, square root beyond), e.g. c=2.0",
            )
        return progressive_lr(base_lr, batch_size, base_batch_size, c)
    assert which is LRScaling.ADASCALE
    if grad_stats is None:
        raise SpecError(
            "grad_stats",
            "the adascale rule needs the gradient statistics "
            "(GradientStats(sqr, var)) measured at the base batch size",
        )
    return adascale_lr(base_lr, batch_size, base_batch_size, grad_stats)
