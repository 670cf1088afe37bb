"""Byte sizes ("20GiB", "512MB", 1024) and durations ("2h", "1h30m", "04:00:00", 90)."""

from __future__ import annotations

import math
import re
from datetime import datetime

from danlu.core.errors import SpecError
from danlu.core.values import quoted

_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*$")

GiB = 1024**3
MiB = 1024**2
MAX_BYTES = 2**62
"""The largest size accepted (4 EiB): far above any machine, within a 64-bit integer."""


def parse_bytes(value: int | float | str, field: str = "size") -> int:
    """Parse a byte count: an integer, or a number with a unit (``20GiB``, ``1.5GB``, ``512MiB``).

    Raises :class:`SpecError` naming ``field`` when the value is not a size.
    """
    if isinstance(value, bool):
        raise SpecError(field, "expected a byte size such as 20GiB or 21474836480, got a boolean")
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise SpecError(field, f"a size must be a finite number (got {value})")
        if value < 0:
            raise SpecError(field, f"a size cannot be negative (got {value})")
        return int(value)
    if not isinstance(value, str):
        raise SpecError(
            field, f"expected a byte size such as 20GiB or 21474836480, got {type(value).__name__}"
        )
    match = _SIZE.match(value)
    if match is None or match.group(2).lower() not in _UNITS:
        raise SpecError(
            field,
            f"{quoted(value)} is not a byte size; write a number with an optional unit "
            "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 20GiB",
        )
    size = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not math.isfinite(size):
        raise SpecError(field, f"{quoted(value)} is too large a size; write at most 4EiB")
    return int(size)


def format_bytes(n: int | float) -> str:
    """Format a byte count with a binary unit, e.g. ``80.0GiB``.

    The unit is chosen by the value as printed: ``1023.99 KiB`` shows as ``1.0MiB``, never
    ``1024.0KiB``."""
    size = float(n)
    if abs(size) < 1024:
        return f"{int(size)}B"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if abs(round(size, 1)) < 1024:
            return f"{size:.1f}{unit}"
    return f"{size / 1024:.1f}TiB"


_DURATION_UNITS: dict[str, float] = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?)\s*([smhd])", re.IGNORECASE)
_DURATION = re.compile(r"^(?:\s*[0-9]+(?:\.[0-9]*)?\s*[smhd]\s*)+$", re.IGNORECASE)
_CLOCK = re.compile(r"^\s*([0-9]+:)?[0-9]+:[0-9]+\s*$")
_DAYS_CLOCK = re.compile(r"^\s*([0-9]+)-([0-9]+)(?::([0-9]+))?(?::([0-9]+))?\s*$")
_DURATION_HELP = (
    "write seconds (3600), a number with units s, m, h, d (90m, 1h30m, 2d), "
    "or a clock time HH:MM:SS or D-HH:MM:SS (04:00:00)"
)


def parse_duration(value: int | float | str, field: str = "duration") -> float:
    """Parse a duration in seconds: a number, units combined (``90s``, ``30m``, ``1h30m``,
    ``2d``) or Slurm's clock forms ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]`` (``04:00:00``,
    ``1-12``; a bare number is seconds, unlike Slurm's minutes).

    Raises :class:`SpecError` naming ``field`` when the value is not a duration; the caller
    checks the range.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SpecError(field, f"expected a duration, got {type(value).__name__}; {_DURATION_HELP}")
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    if _DURATION.match(text):
        return sum(
            float(number) * _DURATION_UNITS[unit.lower()]
            for number, unit in _DURATION_PART.findall(text)
        )
    if _CLOCK.match(text):  # MM:SS or HH:MM:SS
        parts = [int(part) for part in text.split(":")]
        return float(sum(part * 60**power for power, part in enumerate(reversed(parts))))
    days_clock = _DAYS_CLOCK.match(text)
    if days_clock is not None:  # D-HH, D-HH:MM or D-HH:MM:SS
        days, hours, minutes, seconds = (int(part or 0) for part in days_clock.groups())
        return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)
    raise SpecError(field, f"{quoted(value)} is not a duration; {_DURATION_HELP}")


def format_duration(seconds: float) -> str:
    """Format seconds compactly: ``45s``, ``1h30m``, ``2d4h``."""
    if not math.isfinite(seconds):
        return f"{seconds}s"
    left = round(max(0.0, seconds))
    if left < 60:
        return f"{left}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts[:2])


def format_energy(joules: float) -> str:
    """Format energy in watt-hours, three significant digits: ``950`` J -> ``0.264 Wh``,
    ``2.5e6`` -> ``694 Wh``, ``1e9`` -> ``278 kWh``.

    The unit is chosen by the value as printed: 999.6 Wh rounds to 1000 and shows as
    ``1 kWh``, never ``1e+03 Wh``; past 999 MWh the MWh are printed whole (``1500 MWh``)."""
    wh = joules / 3600.0
    if not math.isfinite(wh):
        return f"{joules} J"
    for unit, size in (("Wh", 1.0), ("kWh", 1e3), ("MWh", 1e6)):
        value = wh / size
        shown = f"{value:.3g}"
        if abs(float(shown)) < 1000:
            return f"{shown} {unit}"
    return f"{value:.0f} MWh"


_TIME_HELP = (
    "write a time, 2026-12-01T02:00 (local time unless it ends with an offset such as +00:00 "
    "or Z), or a delay from now, +2h or 90m"
)


def parse_since(value: str, now: float, field: str = "since") -> float:
    """A moment in the past as POSIX seconds: a duration back from ``now`` (``1h``, ``30m``,
    ``2d``) or an ISO 8601 date and time (:func:`parse_time`). Raises :class:`SpecError`
    naming ``field``."""
    try:
        seconds = parse_duration(value, field)
    except SpecError:
        return parse_time(value, now, field)
    if not math.isfinite(seconds) or seconds < 0:
        raise SpecError(field, f"{quoted(value)} is not a duration of 0 or more, e.g. 1h")
    return now - seconds


def parse_time(value: str, now: float, field: str = "time") -> float:
    """A moment as POSIX seconds: an ISO 8601 date and time (local time when it has no
    offset), or a delay from ``now`` (:func:`parse_duration`, an optional ``+`` before it).
    Raises :class:`SpecError` naming ``field``."""
    text = value.strip()
    delay = text[1:] if text.startswith("+") else text
    try:
        seconds = parse_duration(delay, field)
    except SpecError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            raise SpecError(field, f"{quoted(value)} is not a delay of 0 or more; {_TIME_HELP}")
        return now + seconds
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SpecError(field, f"{quoted(value)} is not a time; {_TIME_HELP}") from None
    return (moment if moment.tzinfo is not None else moment.astimezone()).timestamp()
