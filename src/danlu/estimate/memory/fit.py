"""Fitted M(b) = max(C_step, C0 + a*b): any batch size answered instantly from a few traces."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from danlu.core.errors import DataError

DEFAULT_TOLERANCE = 0.005
DEFAULT_MAX_EXTRAPOLATION = 32.0
_SAME = 1e-4


class ExtrapolationError(DataError):
    """The fitted M(b) cannot be trusted at the requested batch size; the message says why."""


@dataclass(frozen=True)
class PiecewiseLinearFit:
    """``M(b) = max(c_step, c0 + slope*b)`` fitted to traced points.

    ``c_step`` is the flat part (the optimizer-step peak, independent of b; 0 when no point
    showed it), ``c0 + slope*b`` the part linear in b (activations). ``points`` are the traced
    ``(b, bytes)``; ``residual`` the largest relative misfit at those points. Predictions are
    refused beyond ``max_extrapolation`` times the largest traced b, when the fit is worse than
    ``tolerance``, and when every traced point sat on the flat part (the slope is unknown).
    """

    c_step: float
    c0: float
    slope: float
    points: tuple[tuple[int, int], ...]
    residual: float
    tolerance: float = DEFAULT_TOLERANCE
    max_extrapolation: float = DEFAULT_MAX_EXTRAPOLATION
    what: str = "memory"

    @property
    def slope_known(self) -> bool:
        """Whether at least two points were on the linear part."""
        return self.slope > 0 or self.c_step == 0 or len(self.points) < 2

    def check(self, batch_size: int) -> None:
        """Raise :class:`ExtrapolationError` where the fit does not support ``batch_size``."""
        traced = dict(self.points)
        if batch_size in traced:
            return
        bmax = max(traced)
        if batch_size < 1:
            raise ExtrapolationError(f"batch size must be >= 1, got {batch_size}")
        if batch_size > min(traced) and not self.slope_known:
            raise ExtrapolationError(
                f"fewer than two of the traced batch sizes {sorted(traced)} rise above the "
                f"optimizer-step peak, so the growth with b is unknown; trace larger batches "
                f"(e.g. {bmax * 4} and {bmax * 8})"
            )
        if self.residual > self.tolerance:
            raise ExtrapolationError(
                f"{self.what} is not piecewise linear in b over the traced points "
                f"{sorted(traced)} (misfit {self.residual:.2%} > {self.tolerance:.2%}); "
                f"trace b={batch_size} directly"
            )
        if batch_size > bmax * self.max_extrapolation:
            raise ExtrapolationError(
                f"b={batch_size} is more than {self.max_extrapolation:g}x the largest traced "
                f"batch ({bmax}); trace a batch size nearer to it"
            )

    def __call__(self, batch_size: int) -> int:
        """M(b) in bytes (exact at traced points)."""
        self.check(batch_size)
        traced = dict(self.points)
        if batch_size in traced:
            return traced[batch_size]
        bmin = min(traced)
        if batch_size < bmin:  # M is non-decreasing: the smallest traced point bounds it
            return (
                max(round(self.c0 + self.slope * batch_size), int(self.c_step))
                if self.c_step
                else traced[bmin]
            )
        return round(max(self.c_step, self.c0 + self.slope * batch_size))


def fit_piecewise_linear(
    points: Mapping[int, int],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    max_extrapolation: float = DEFAULT_MAX_EXTRAPOLATION,
    what: str = "memory",
) -> PiecewiseLinearFit:
    """Fit ``max(C_step, C0 + a*b)`` to two or more ``{b: bytes}`` points.

    The points are split into a flat prefix and a linear suffix (least squares); the split with
    the smallest worst relative misfit wins, preferring the all-linear one on ties.
    """
    pts = sorted((int(b), int(m)) for b, m in points.items())
    if len(pts) < 2:
        raise DataError("need at least two traced batch sizes to fit M(b)")
    low = pts[0][1]
    plateau = sum(1 for _, m in pts if abs(m - low) <= _SAME * low)
    # two equal values cannot both be on the (increasing) linear part: they are the flat part;
    # a single lowest point may be either
    splits = [plateau] if plateau >= 2 else [0, 1]
    best: PiecewiseLinearFit | None = None
    for k in splits:  # pts[:k] flat, pts[k:] linear
        flat, lin = pts[:k], pts[k:]
        c_step = float(max((m for _, m in flat), default=0))
        if len(lin) >= 2:
            n = len(lin)
            mb = sum(b for b, _ in lin) / n
            mm = sum(m for _, m in lin) / n
            var = sum((b - mb) ** 2 for b, _ in lin)
            slope = sum((b - mb) * (m - mm) for b, m in lin) / var
            c0 = mm - slope * mb
            if slope < 0:
                continue
        elif flat:  # slope unknown: all flat, or a single point above the plateau
            slope, c0 = 0.0, c_step
        else:
            continue
        res = max(abs(max(c_step, c0 + slope * b) - m) / m for b, m in pts)
        fit = PiecewiseLinearFit(
            c_step, c0, slope, tuple(pts), res, tolerance, max_extrapolation, what
        )
        if best is None or res < best.residual - 1e-12:
            best = fit
    assert best is not None
    return best
