"""Checks of a policy's options, shared by the registry (options by name, as ``danlu sim run
--option`` passes them) and the built-in policies, which check themselves when built: each
option's declared type (:func:`check_option_type`), a ``placement`` option's name, and each
numeric option's valid range (:func:`check_options`, with the policy's ``option_ranges``)."""

from __future__ import annotations

import dataclasses
import math
import sys
import typing
from collections.abc import Mapping
from typing import Any

from danlu.core.errors import ConfigError, UnknownNameError
from danlu.sched.placement.gang import STRATEGIES

INF = math.inf

OptionRange = tuple[float, float, tuple[bool, bool]]
"""(low, high, (low included, high included)); ``inf`` for no upper bound. NaN and the
infinities are never inside."""


def check_option_type(policy: str, key: str, value: object, hint: object) -> None:
    """Raise :class:`ConfigError` when ``value`` does not have the option's declared type
    ``hint`` (bool, int, float, str or a tuple of numbers; an int is a valid float, a bool is
    not a number; other hints are not checked)."""
    what: str | None = None
    if hint is bool:
        what = None if isinstance(value, bool) else "true or false"
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        what = None if ok else "a whole number"
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        what = None if ok else "a number"
    elif hint is str:
        what = None if isinstance(value, str) else "a string"
    elif typing.get_origin(hint) is tuple:
        ok = isinstance(value, tuple | list) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        )
        what = None if ok else "a list of numbers"
    if what is not None:
        raise ConfigError(f"policy {policy!r} option {key!r} must be {what}, got {value!r}")


def check_options(policy: Any, ranges: Mapping[str, OptionRange]) -> None:
    """Raise :class:`ConfigError` for the first option of ``policy`` (a policy dataclass)
    whose value has the wrong type or lies outside its range in ``ranges`` (for a tuple
    option: any of its values), and :class:`UnknownNameError` for a ``placement`` that is
    none of the placement strategies (the registry's error). The message names the option,
    what it accepts and its default: ``"<name> policy: <option> must be in [0, inf), got
    -1 (default 30.0)"``."""
    name = str(getattr(policy, "name", type(policy).__name__))
    hints = typing.get_type_hints(type(policy))
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(policy):
        if f.init:
            check_option_type(name, f.name, getattr(policy, f.name), hints[f.name])
            defaults[f.name] = f.default
    placement = getattr(policy, "placement", None)
    if placement is not None and placement not in STRATEGIES:
        # else the first round raised it, after the policy had been built and handed on
        raise UnknownNameError("placement", str(placement), list(STRATEGIES))
    for option, (low, high, closed) in ranges.items():
        value = getattr(policy, option)
        values = tuple(value) if isinstance(value, tuple | list) else (value,)
        if all(_inside(v, low, high, closed) for v in values):
            continue
        span = f"{'[' if closed[0] else '('}{low:g}, {high:g}{']' if closed[1] else ')'}"
        what = f"every value of {option}" if isinstance(value, tuple | list) else option
        huge = any(_too_large(v) for v in values)
        fits = f" and at most {sys.float_info.max:.1e} (a float)" if huge else ""
        raise ConfigError(
            f"{name} policy: {what} must be in {span}{fits}, got {_shown(value)} "
            f"(default {defaults[option]!r})"
        )


_SHOWN_DIGITS = 20
"""Digits of a whole number an error message shows before it abbreviates it."""


def _shown(value: object) -> str:
    """``value`` as an error message shows it: its repr, a whole number of more than
    :data:`_SHOWN_DIGITS` digits (JSON keeps hundreds exactly) abbreviated to its first
    digits and its length, as is each such number in a list."""
    if isinstance(value, tuple | list):
        inner = ", ".join(_shown(v) for v in value)
        return (
            f"({inner}{',' if len(value) == 1 else ''})"
            if isinstance(value, tuple)
            else f"[{inner}]"
        )
    if isinstance(value, int) and not isinstance(value, bool):
        digits = str(abs(value))
        if len(digits) > _SHOWN_DIGITS:
            sign = "-" if value < 0 else ""
            return f"{sign}{digits[:_SHOWN_DIGITS]}... ({len(digits)} digits)"
    return repr(value)


def _too_large(value: object) -> bool:
    """Whether ``value`` is a whole number past a float's range (JSON keeps it exactly)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    try:
        float(value)
    except OverflowError:
        return True
    return False


def _inside(value: float, low: float, high: float, closed: tuple[bool, bool]) -> bool:
    """Whether ``value`` lies in the range. A whole number too large for a float is never
    inside (every policy computes with floats: it would overflow in a round), nor are NaN
    and the infinities."""
    if _too_large(value):
        return False
    above = value >= low if closed[0] else value > low
    below = value <= high if closed[1] else value < high
    return above and below and math.isfinite(value)


def check_reserve(policy: str, backfill: bool, reserve: bool) -> None:
    """Raise :class:`ConfigError` when a queue policy is given ``reserve`` (EASY backfill)
    without ``backfill``: the reservation only limits which later jobs backfill, so under
    strict order (no backfill) it would be ignored without a word, and a user who asked for
    EASY backfill would get strict order."""
    if reserve and not backfill:
        raise ConfigError(
            f"{policy} policy: reserve (EASY backfill) works with backfill=true, but backfill "
            "is false (strict order: the first job that does not fit holds back every later "
            "one, so nothing is reserved); set backfill=true as well, or leave reserve out"
        )
