"""Argument checks shared by the estimators: a real number of the right range, or a
:class:`~danlu.core.errors.SpecError` naming the argument; a switch that is a bool.

``math.isfinite`` raised a bare ``TypeError`` for a string or ``None``, and let ``True``
through as the number 1: every estimator checks its numbers here instead.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from danlu.core.errors import SpecError
from danlu.core.values import check_positive_int, quoted, range_message


def is_real_number(value: Any) -> bool:
    """True for an int, float or other real number that is not a bool (NaN and inf too)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def as_float(value: float) -> float:
    """``float(value)``, with an integer beyond float range (``10**400``, which made
    ``float`` and ``math.isfinite`` raise OverflowError) read as ``inf`` of its sign."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def check_finite(field: str, value: Any, *, positive: bool, what: str = "a number") -> float:
    """``value`` as a float; :class:`SpecError` on ``field`` unless it is a finite real
    number (not a bool), > 0 when ``positive``, else >= 0. ``what`` names the quantity in
    the message (``"a number of seconds"``)."""
    number = as_float(value) if is_real_number(value) else math.nan
    if not math.isfinite(number) or (number <= 0 if positive else number < 0):
        bound = "> 0" if positive else ">= 0"
        raise SpecError(field, f"must be {what}, finite and {bound}, got {quoted(value)}")
    return number


def check_bool(field: str, value: Any) -> bool:
    """``value`` as a bool; :class:`SpecError` on ``field`` unless it is one (a NumPy bool
    too). A string such as ``"no"`` or ``"false"`` was truthy and switched the option on."""
    if not isinstance(value, bool | np.bool_):
        raise SpecError(field, f"must be True or False, got {quoted(value)}")
    return bool(value)


def check_count(field: str, value: Any, high: int) -> int:
    """``value`` as an int; :class:`SpecError` on ``field`` unless it is an integer (not a
    bool) in ``1..high``. The bound keeps the float arithmetic of the estimators finite: an
    integer such as ``10**400`` raised a bare OverflowError where it met a float."""
    check_positive_int(field, value)
    if value > high:
        raise SpecError(field, range_message(1, high, value))
    return int(value)
