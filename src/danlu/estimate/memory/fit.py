"""Fitted M(b) = max(C_step, C0 + a*b): any batch size answered instantly from a few traces."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from danlu.core.errors import DataError, SpecError
from danlu.core.spec import MAX_BATCH
from danlu.core.values import is_whole_number, quoted
from danlu.estimate.checks import as_float, check_finite, is_real_number

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
    step_slope: float = 0.0
    two_phase: bool = False

    def __post_init__(self) -> None:
        _check_limits(self.tolerance, self.max_extrapolation)

    @property
    def slope_known(self) -> bool:
        """Whether at least two points were on the linear part."""
        return self.two_phase or self.slope > 0 or self.c_step == 0 or len(self.points) < 2

    def check(self, batch_size: int) -> None:
        """Raise :class:`ExtrapolationError` where the fit does not support ``batch_size``,
        :class:`SpecError` unless it is a whole number (NaN, a string or None raised a bare
        ValueError or TypeError)."""
        _check_whole(batch_size)
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
        problem = self.refusal()
        if problem:
            raise ExtrapolationError(f"{problem}; trace b={batch_size} directly")
        if batch_size > bmax * self.max_extrapolation:
            raise ExtrapolationError(
                f"b={batch_size} is more than {self.max_extrapolation:g}x the largest traced "
                f"batch ({bmax}); trace a batch size nearer to it"
            )

    def refusal(self) -> str:
        """Why the fit answers no untraced batch size at all ("" when it may)."""
        if self.residual > self.tolerance:
            return (
                f"{self.what} is not piecewise linear in b over the traced points "
                f"{sorted(dict(self.points))} (misfit {self.residual:.2%} > "
                f"{self.tolerance:.2%})"
            )
        return ""

    def __call__(self, batch_size: int) -> int:
        """M(b) in bytes (exact at traced points)."""
        self.check(batch_size)
        traced = dict(self.points)
        if batch_size in traced:
            return traced[batch_size]
        bmin = min(traced)
        if self.two_phase:
            return round(self.value(batch_size))
        if batch_size < bmin:  # M is non-decreasing: the smallest traced point bounds it
            return (
                max(round(self.c0 + self.slope * batch_size), int(self.c_step))
                if self.c_step
                else traced[bmin]
            )
        return round(self.value(batch_size))

    def value(self, batch_size: float) -> float:
        """The fitted curve, without range checks."""
        return max(self.c_step + self.step_slope * batch_size, self.c0 + self.slope * batch_size)


def _check_points(points: Sequence[tuple[int, float]], what: str) -> None:
    """Raise :class:`DataError` unless every traced ``(b, bytes)`` has ``b >= 1`` and
    ``bytes > 0``: the misfits are relative to the traced bytes, and a zero peak raised
    ZeroDivisionError (a NaN misfit in :class:`EnvelopeFit`, which passed every check)."""
    for b, m in points:
        if b < 1:
            raise DataError(f"{what}: traced batch size {b} is not a batch; trace b >= 1")
        if not m > 0:
            raise DataError(
                f"{what}: the trace at b={b} peaks at {m} bytes; a training step holds memory, "
                "so the trace is broken: check that make_batch(b) and loss_fn run a step, "
                "and trace again"
            )


def _check_batch(what: str, batch_size: Any) -> None:
    """Raise :class:`DataError` unless a traced batch size is an integer (not a bool): 1.5
    was read as 1, a second point at b = 1 (ZeroDivisionError in the line through them);
    and at most ``MAX_BATCH``, the most the tracer traces (``10**400`` raised a bare
    OverflowError in the line's division)."""
    if not is_whole_number(batch_size):
        raise DataError(
            f"{what}: traced batch size {quoted(batch_size)} is not a whole number; trace integer "
            "batch sizes"
        )
    if batch_size > MAX_BATCH:
        raise DataError(
            f"{what}: traced batch size {quoted(batch_size)} is beyond the largest batch, "
            f"{MAX_BATCH:,}; trace smaller batch sizes"
        )


def _check_whole(batch_size: Any) -> None:
    """Raise :class:`SpecError` on ``batch_size`` unless it is an integer, not a bool: the
    batch a fit is asked about (its range is the fit's to check)."""
    if not is_whole_number(batch_size):
        raise SpecError(
            "batch_size", f"must be a whole number of samples, got {quoted(batch_size)}"
        )


def _check_limits(tolerance: Any, max_extrapolation: Any) -> None:
    """Raise :class:`SpecError` unless ``tolerance`` is a finite share >= 0 and
    ``max_extrapolation`` a finite factor > 0 (a string raised a bare TypeError at the
    first prediction, ``-10**400`` a bare OverflowError, NaN refused nothing)."""
    check_finite("tolerance", tolerance, positive=False, what="a share of the peak")
    check_finite("max_extrapolation", max_extrapolation, positive=True, what="a factor")


def _as_points(points: Mapping[Any, Any], what: str) -> list[tuple[int, int]]:
    """The traced ``{b: bytes}`` as sorted ``(b, bytes)`` integers; :class:`DataError` unless
    every ``b`` is an integer and every peak a finite number (NaN and inf raised a bare
    ValueError or OverflowError, a string of digits was read as a number)."""
    out = []
    for b, m in points.items():
        _check_batch(what, b)
        if not (is_real_number(m) and math.isfinite(as_float(m))):
            raise DataError(
                f"{what}: the trace at b={b} peaks at {quoted(m)}, not a finite number of bytes; "
                "trace again"
            )
        out.append((int(b), int(m)))
    return sorted(out)


def _line(points: list[tuple[int, int]]) -> tuple[float, float]:
    n = len(points)
    mb = sum(b for b, _ in points) / n
    mm = sum(m for _, m in points) / n
    var = sum((b - mb) ** 2 for b, _ in points)
    slope = sum((b - mb) * (m - mm) for b, m in points) / var if var else 0.0
    return mm - slope * mb, slope


def fit_two_phase(
    passes: Mapping[int, int],
    optimizer: Mapping[int, int],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    max_extrapolation: float = DEFAULT_MAX_EXTRAPOLATION,
    what: str = "memory",
) -> PiecewiseLinearFit:
    """Fit M(b) from the peaks of the two phases of each traced step, each linear in b.

    ``passes`` are the peaks of the forward/backward passes (``C0 + a*b``), ``optimizer`` the
    peaks of the optimizer step (``C_step + e*b``; ``e`` is small: the batch stays alive).
    Knowing both at every traced b removes the ambiguity of a flat-looking overall peak.
    """
    if len(passes) < 2 or set(passes) != set(optimizer):
        raise DataError("need the phase peaks of at least two traced batch sizes to fit M(b)")
    pa = _as_points(passes, what)
    po = _as_points(optimizer, what)
    _check_points(pa, what)
    _check_points(po, what)
    c0, slope = _line(pa)
    c_step, step_slope = _line(po)
    res = max(
        abs(c + k * b - m) / m
        for (c, k), pts in (((c0, slope), pa), ((c_step, step_slope), po))
        for b, m in pts
    )
    overall = tuple((b, max(m, dict(po)[b])) for b, m in pa)
    return PiecewiseLinearFit(
        c_step, c0, slope, overall, res, tolerance, max_extrapolation, what, step_slope, True
    )


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
    pts = _as_points(points, what)
    if len(pts) < 2:
        raise DataError("need at least two traced batch sizes to fit M(b)")
    _check_points(pts, what)
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


def nonlinear_allocation(lives: Mapping[int, Sequence[int]]) -> str:
    """Why the allocations of aligned live curves (``{b: live bytes after each event}``) are
    not linear in b ("" when they are, or fewer than three curves tell).

    The live bytes are exact integers. An allocation's size is the rise of the curve at its
    event, the same storage at every b; its second difference over three batch sizes is
    zero exactly when its size is linear in b. A non-zero one (a ``b x b`` matrix, as in a
    contrastive loss) makes the fitted lines wrong away from the traced points, by a term the
    traced points hide. Frees are not compared: their order among one another may differ
    from trace to trace (the autocast cache's casts) in curves not put in one order, which
    moves the curve without any size being non-linear.

    A size that stays the same over part of the traced range and changes over another is
    named as such, with the fix: a buffer sized by something other than b below some batch
    size (``--target cpu``'s batch normalisation kernels keep a buffer per CPU thread they
    run on, and small batches run on fewer threads) is linear from there on, so larger
    traced batch sizes fit it; a ``b x b`` matrix grows at every b."""
    bs = sorted(lives)
    if len(bs) < 3:
        return ""
    curves = [lives[b] for b in bs]
    for t in range(1, min(len(c) for c in curves)):
        sizes = [c[t] - c[t - 1] for c in curves]
        if min(sizes) <= 0:  # a free (or no allocation at some b)
            continue
        for i in range(len(bs) - 2):
            (b0, b1, b2), (s0, s1, s2) = bs[i : i + 3], sizes[i : i + 3]
            if (s2 - s1) * (b1 - b0) != (s1 - s0) * (b2 - b1):
                where = (
                    f"{s0}, {s1} and {s2} bytes at b = {b0}, {b1} and {b2}, event {t} of the "
                    "measured step"
                )
                if s0 == s1 or s1 == s2:
                    return (
                        f"an allocation of the step is not linear in b ({where}: flat over "
                        "part of the range, e.g. a CPU kernel's buffer sized by the threads "
                        "it runs on, as batch normalisation's with --target cpu), and the fit "
                        f"is linear in b; trace larger batch sizes (e.g. {bs[-1] * 2}, "
                        f"{bs[-1] * 4} and {bs[-1] * 8}), where it is linear"
                    )
                return (
                    f"an allocation of the step is not linear in b ({where}: e.g. a b x b "
                    "matrix), and the fit is linear in b"
                )
    return ""


class EnvelopeFit:
    """M(b) = max over the step's events t of (A_t + B_t*b): the exact peak of a step whose
    program does not depend on b and whose tensor sizes are linear in b.

    Traces at different batch sizes replay the same allocation sequence, so the live bytes
    after each event are fitted by a line in b (least squares over the traced points); the
    peak at any b is the upper envelope of those lines. ``lives`` must list the events in one
    order at every b, as :func:`~danlu.estimate.memory.trace_result.window_live` does (each
    run of frees in storage-id order): a line through different events at different b is
    wrong away from the traced points. The same refusals as
    :class:`PiecewiseLinearFit`: misfit above ``tolerance`` (relative to the peak) or b beyond
    ``max_extrapolation`` times the largest traced batch size; and every untraced b when
    three or more traced sizes show an allocation whose size is not linear in b
    (:func:`nonlinear_allocation`; ``nonlinear`` says which). ``event_misfit`` is the largest
    misfit of any event's line at the traced points, relative to the peak (a diagnostic: it
    also holds frees that come in another order between traces without being consecutive).
    """

    slope_known = True

    def __init__(
        self,
        lives: Mapping[int, list[int]],
        *,
        tolerance: float = DEFAULT_TOLERANCE,
        max_extrapolation: float = DEFAULT_MAX_EXTRAPOLATION,
        what: str = "memory",
    ) -> None:
        import numpy as np

        _check_limits(tolerance, max_extrapolation)
        if len(lives) < 2 or len({len(v) for v in lives.values()}) != 1:
            raise DataError("need aligned traces of at least two batch sizes")
        for b in lives:  # 1.5 looked up the curve of b = 1 (int(b)) as a second point
            _check_batch(what, b)
        bs = np.array(sorted(lives), dtype=float)
        mat = np.array([lives[int(b)] for b in bs], dtype=float)  # (k, T)
        mb = bs.mean()
        var = ((bs - mb) ** 2).sum()
        self.slopes = ((bs - mb)[:, None] * (mat - mat.mean(axis=0))).sum(axis=0) / var
        self.intercepts = mat.mean(axis=0) - self.slopes * mb
        peaks = mat.max(axis=1)
        _check_points([(int(b), int(p)) for b, p in zip(bs, peaks, strict=True)], what)
        fitted = self.intercepts[None, :] + self.slopes[None, :] * bs[:, None]
        # misfit of the predicted peaks at the traced points (per-event misfits that never
        # reach the peak do not matter)
        self.event_misfit = float((np.abs(fitted - mat).max(axis=1) / peaks).max())
        self.nonlinear = nonlinear_allocation(lives)
        self.residual = float((np.abs(fitted.max(axis=1) - peaks) / peaks).max())
        self.points = tuple((int(b), int(p)) for b, p in zip(bs, peaks, strict=True))
        self.tolerance = tolerance
        self.max_extrapolation = max_extrapolation
        self.what = what
        t = int(np.argmax(self.intercepts + self.slopes * bs[-1]))
        self.c0, self.slope = float(self.intercepts[t]), float(self.slopes[t])
        t0 = int(np.argmax(self.intercepts))
        self.c_step = float(self.intercepts[t0])

    def check(self, batch_size: int) -> None:
        """Raise :class:`ExtrapolationError` where the fit does not support ``batch_size``,
        :class:`SpecError` unless it is a whole number."""
        _check_whole(batch_size)
        traced = dict(self.points)
        if batch_size in traced:
            return
        if batch_size < 1:
            raise ExtrapolationError(f"batch size must be >= 1, got {batch_size}")
        problem = self.refusal()
        if problem:
            raise ExtrapolationError(f"{problem}; trace b={batch_size} directly")
        if batch_size > max(traced) * self.max_extrapolation:
            raise ExtrapolationError(
                f"b={batch_size} is more than {self.max_extrapolation:g}x the largest traced "
                f"batch ({max(traced)}); trace a batch size nearer to it"
            )

    def refusal(self) -> str:
        """Why the fit answers no untraced batch size at all ("" when it may)."""
        if self.nonlinear:
            return f"{self.what} cannot be extrapolated: {self.nonlinear}"
        if self.residual > self.tolerance:
            return (
                f"{self.what} is not linear in b over the traced points "
                f"{sorted(dict(self.points))} (misfit {self.residual:.2%} > "
                f"{self.tolerance:.2%})"
            )
        return ""

    def __call__(self, batch_size: int) -> int:
        """M(b) in bytes (exact at traced points)."""
        self.check(batch_size)
        traced = dict(self.points)
        if batch_size in traced:
            return traced[batch_size]
        return round(float((self.intercepts + self.slopes * batch_size).max()))
