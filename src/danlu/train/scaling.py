"""Learning-rate co-scaling when the global batch changes: a thin bridge to
:mod:`danlu.estimate.lr`, which owns the rules (linear, sqrt, progressive, AdaScale gain;
seed 000 section 4.3). Here we only turn the training-time measurements into its arguments.
"""

from __future__ import annotations

from danlu.estimate.goodput import GradientStats
from danlu.estimate.lr import rule_names, scale_lr

__all__ = ["lr_factor", "normalised_rule", "rule_names"]


def normalised_rule(rule: str) -> str:
    """``rule`` as :func:`lr_factor` compares it: stripped and lower-case (``"AdaScale"`` is
    ``"adascale"``). :func:`danlu.train.init` checks and normalises its ``lr_scaling`` once."""
    return rule.strip().lower()


def lr_factor(
    rule: str, batch: int, base_batch: int, *, c: float = 2.0, sigma2: float = 0.0, mu2: float = 0.0
) -> float:
    """Multiplier of the base LR when the global batch goes from ``base_batch`` to ``batch``.

    ``rule`` is ``"none"`` or a name of :func:`danlu.estimate.lr.rule_names`, in any case
    (:func:`normalised_rule`). For
    ``"adascale"``, ``sigma2`` is the per-sample gradient variance and ``mu2`` the squared norm
    of the true gradient (from :class:`danlu.train.batch.GradientNoiseScale`); before any
    estimate the gain is 1.
    """
    rule = normalised_rule(rule)
    if rule == "none" or batch == base_batch:
        return 1.0
    stats = None
    if rule == "adascale":
        stats = GradientStats(sqr=max(mu2, 0.0), var=max(sigma2, 0.0) / base_batch)
    return scale_lr(rule, 1.0, batch, base_batch, c=c, grad_stats=stats)
