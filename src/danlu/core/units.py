"""Byte sizes ("20GiB", "512MB", 1024) and durations ("2h", "1h30m", "04:00:00", 90).

A size's unit, in any case: ``KiB``, ``MiB``, ``GiB``, ``TiB`` (``Ki``...) are powers of
1024; ``KB``, ``MB``, ``GB``, ``TB`` and a bare ``K``, ``M``, ``G``, ``T`` powers of 1000
(``80G`` is 80,000,000,000 bytes, as ``80GB``); no unit is bytes. Every size danlu reads
(a job spec's, the cli's flags, ``DANLU_FAKE_GPUS``, ``DANLU_MAX_BODY_BYTES``) is read by
:func:`parse_bytes`, so by this one rule (docs/api.md states it)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from datetime import time as dt_time
from decimal import Decimal
from typing import NamedTuple, NoReturn

from danlu.core.errors import SpecError
from danlu.core.metric_record import MAX_TIME
from danlu.core.spec_text import given_words
from danlu.core.values import quoted, show_number

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
    """Parse a byte count: an integer, or a number with a unit (``20GiB``, ``1.5GB``, ``512MiB``),
    at most :data:`MAX_BYTES`.

    The size is worked out exactly from the digits written (``8.2GB`` is 8,200,000,000
    bytes, not the 8,199,999,999 of a float product); a fraction of a byte left over is
    dropped (``1.0005KB`` is 1,000 bytes, ``0.3GiB`` 322,122,547).

    Raises :class:`SpecError` naming ``field`` when the value is not a size, is too large,
    is a number of bytes with a fraction (``0.5``, ``0.5B``, a float ``0.5``: no whole
    number of bytes) or is above 0 but less than one byte (``0.0000001KB``): dropping the
    fraction read them as fewer bytes, 0 for half a byte, which for a ``gpu_memory`` means
    whole GPUs (:func:`_whole_bytes`).
    """
    if isinstance(value, bool):
        raise SpecError(
            field,
            f"expected a byte size such as 20GiB or 21474836480, got {given_words(value)}",
        )
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise SpecError(field, f"a size must be a finite number (got {value})")
        if value < 0:
            raise SpecError(field, f"a size cannot be negative (got {value})")
        if isinstance(value, float) and not value.is_integer():
            _fraction_of_a_byte(str(value), field)
        return _at_most_max(int(value), value, field)
    if not isinstance(value, str):
        raise SpecError(
            field,
            f"expected a byte size such as 20GiB or 21474836480, got {given_words(value)}",
        )
    match = _SIZE.match(value)
    if match is None or match.group(2).lower() not in _UNITS:
        raise SpecError(
            field,
            f"{quoted(value)} is not a byte size; write a number with an optional unit "
            "(KiB, MiB, GiB, TiB: powers of 1024; KB, MB, GB, TB: of 1000; B or none: bytes), "
            "e.g. 20GiB",
        )
    whole, _, fraction = match.group(1).partition(".")
    if len(whole.lstrip("0")) > _MAX_WHOLE_DIGITS:  # no int() of thousands of digits
        _too_large(value, field)
    if len(fraction) > _MAX_DECIMALS:
        raise SpecError(
            field, f"{quoted(value)} has more decimals than a size needs; write at most 30"
        )
    # exact integer arithmetic; the floor division drops a fraction of a byte
    written = _whole(whole + fraction)
    size = written * _UNITS[match.group(2).lower()] // 10 ** len(fraction)
    _whole_bytes(value, match.group(1), match.group(2), written, size, field)
    return _at_most_max(size, value, field)


def _whole_bytes(value: str, number: str, unit: str, written: int, size: int, field: str) -> None:
    """Refuse a size written as ``number`` ``unit`` (its digits ``written``, ``size`` bytes
    once its fraction of a byte is dropped) that is no whole number of bytes in bytes
    (``0.5``, ``1.5B``), or is above 0 but less than one byte in a larger unit
    (``0.0000001KB``): either was read as fewer bytes than written, 0 for a value below one
    byte, and a ``gpu_memory`` of 0 is whole GPUs. A fraction dropped from a larger size
    (``0.3GiB``) stays dropped."""
    _, _, fraction = number.partition(".")
    if _UNITS[unit.lower()] == 1 and fraction.strip("0"):
        if unit:
            raise SpecError(
                field,
                f"{quoted(value)} is a fraction of a byte (a size in B is whole bytes): "
                f"write whole bytes, or the unit meant, e.g. {number}GiB",
            )
        _fraction_of_a_byte(number, field)
    if size == 0 and written > 0:
        raise SpecError(
            field,
            f"{quoted(value)} is less than one byte, which would be read as 0: give a size "
            "of one byte or more, in the unit meant (e.g. 20GiB)",
        )


def _fraction_of_a_byte(number: str, field: str) -> NoReturn:
    """Refuse ``number`` bytes, written without a unit, that has a fraction."""
    raise SpecError(
        field,
        f"{number} bytes is a fraction of a byte (a number without a unit is bytes): "
        f"give the size a unit, e.g. {number}GiB",
    )


def _whole(digits: str) -> int:
    """The number ASCII ``digits`` write, leading zeros dropped first: ``int()`` counts them
    against its 4,300 digits (``sys.get_int_max_str_digits()``), so ``0000...01GiB`` (1 GiB,
    as ``01GiB`` is) was a bare ``ValueError``. The caller has bounded the digits after
    them."""
    return int(digits.lstrip("0") or "0")


_MAX_WHOLE_DIGITS = 20
"""More digits before the decimal point than any size within :data:`MAX_BYTES` has."""
_MAX_DECIMALS = 30
"""The most digits after the decimal point a size may have."""


def _at_most_max(size: int, value: object, field: str) -> int:
    if size > MAX_BYTES:
        _too_large(value, field)
    return size


def _too_large(value: object, field: str) -> NoReturn:
    raise SpecError(
        field,
        f"{quoted(value)} is too large a size; write one within 0..4194304TiB (4 EiB, "
        "far above any machine)",
    )


def _magnitude(number: int) -> str:
    """A huge whole number by its magnitude, three significant digits (``1.16e+303``), one
    past a float's range too."""
    try:
        return f"{float(number):.3g}"
    except OverflowError:
        return show_number(number)


def format_bytes(n: int | float) -> str:
    """Format a byte count with a binary unit, e.g. ``80.0GiB``, ``1.25TiB``.

    The number is the shortest of one to three decimals that is the size exactly
    (``1280GiB`` is ``1.25TiB``, ``1152GiB`` ``1.125TiB``, ``80GiB`` ``80.0GiB``); any other
    size (a measurement, a size written with a fraction of a byte dropped) shows three
    significant digits, at least one decimal (``1.04GiB``, ``79.2GiB``, ``123.4GiB``): never
    fewer decimals than before, and below 10 of a unit never a tenth of it rounded away (one
    decimal made ``1280GiB`` ``1.2TiB``).

    The unit is chosen by the value as printed: ``1023.99 KiB`` shows as ``1.00MiB``, never
    ``1024.0KiB``. A size past any machine's (more than :data:`MAX_BYTES`, from a float
    measurement) shows by its magnitude in TiB (``9.09e+295TiB`` for ``1e308``, not 300
    digits); NaN and the infinities as ``nan``, ``inf`` and ``-inf``."""
    if isinstance(n, int) and abs(n) > MAX_BYTES:  # float() of one past 1e308 overflows
        return f"{_magnitude(n // 1024**4)}TiB"
    size = float(n)
    if not math.isfinite(size):
        return str(size)
    if abs(size) < 1024:
        return f"{int(size)}B"
    if abs(size) > MAX_BYTES:  # a float measurement beyond any machine
        return f"{size / 1024**4:.3g}TiB"
    sign = "-" if size < 0 else ""
    exact = int(abs(size)) if size.is_integer() else None  # whole bytes may show exactly
    for unit, scale in _BINARY_UNITS:
        shown = _shown_in_unit(abs(size) / scale, scale, exact)
        if unit == "TiB" or float(shown) < 1024:
            return f"{sign}{shown}{unit}"
    raise AssertionError("unreachable: TiB is the last unit")  # pragma: no cover


_BINARY_UNITS = (("KiB", 1024), ("MiB", 1024**2), ("GiB", 1024**3), ("TiB", 1024**4))
"""The units :func:`format_bytes` shows a size in, smallest first."""


def _shown_in_unit(value: float, scale: int, exact: int | None) -> str:
    """``value`` (in units of ``scale`` bytes) as :func:`format_bytes` shows it: the fewest
    decimals, one to three, whose number of units is ``exact`` bytes to the byte, else
    three significant digits with at least one decimal."""
    if exact is not None:
        for decimals in (1, 2, 3):
            shown = f"{value:.{decimals}f}"
            if Decimal(shown) * scale == exact:
                return shown
    return f"{value:.2f}" if round(value, 2) < 10 else f"{value:.1f}"


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
    checks the range. A ``+`` before one (``+5``, ``+5m``) is refused, saying to write it
    without: ``float()`` read ``+5`` as 5 while ``+5m`` was no duration (a ``+`` is a
    delay's mark in :func:`parse_time`, which takes it off first).
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SpecError(field, f"expected a duration, got {given_words(value)}; {_DURATION_HELP}")
    if isinstance(value, int):
        return _seconds(value, value, field)
    if isinstance(value, float):
        return value
    text = value.strip()
    rest = text[1:].strip()
    if text.startswith("+") and not rest.startswith(("+", "-")) and _is_duration(rest):
        reason = f"has a '+': a duration is written without one, {rest}"
        raise _Refused(field, f"{quoted(value)} {reason}; {_DURATION_HELP}", reason)
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:  # float() reads 1_000 and other scripts' digits (١٢) too
        if text.isascii() and "_" not in text:
            return seconds
        reason = "is not a plain number: write ASCII digits without '_' separators, e.g. 1000"
        raise _Refused(field, f"{quoted(value)} {reason}; {_DURATION_HELP}", reason)
    if text.startswith("-") and not rest.startswith(("+", "-")) and _is_duration(rest):
        # -5m, -1:00: "not a duration" said nothing of the sign (-5, a number, is read, and
        # its range refused by the caller, as any number below it)
        reason = f"is below zero: a duration is 0 or more, e.g. {rest}"
        raise _Refused(field, f"{quoted(value)} {reason}; {_DURATION_HELP}", reason)
    if _DURATION.match(text):
        return _sum_of_units(_DURATION_PART.findall(text), value, field)
    if _CLOCK.match(text):  # MM:SS or HH:MM:SS
        parts = _clock_fields(text.split(":"), value, field)
        form = "HH:MM:SS" if len(parts) == 3 else "MM:SS"
        _check_clock(parts[1:], (59, 59)[: len(parts) - 1], form, value, field)
        total = sum(part * 60**power for power, part in enumerate(reversed(parts)))
        return _seconds(total, value, field)
    days_clock = _DAYS_CLOCK.match(text)
    if days_clock is not None:  # D-HH, D-HH:MM or D-HH:MM:SS
        given = [part for part in days_clock.groups() if part is not None]
        days, *clock = _clock_fields(given, value, field)
        form = ("D-HH", "D-HH:MM", "D-HH:MM:SS")[len(clock) - 1]
        _check_clock(clock, (23, 59, 59)[: len(clock)], form, value, field)
        hours, minutes, seconds = [*clock, 0, 0][:3]
        return _seconds(((days * 24 + hours) * 60 + minutes) * 60 + seconds, value, field)
    if _FOUR_FIELDS.match(text):  # 1:00:00:00, a day meant: the days go before a dash
        first, _, rest = text.partition(":")
        fix = f"write the days before a dash, {first}-{rest}"
        raise _Refused(
            field,
            f"{quoted(value)} is not a duration; {_DURATION_HELP}; a clock time has at most "
            f"three fields: {fix}",
            f"has four clock fields, one more than a clock time has: {fix}",
        )
    bare = text.replace("_", "")
    if bare != text and _DURATION.match(bare):  # 1_000s, as 1_000 above
        reason = f"has '_' separators: write ASCII digits without them, e.g. {bare}"
        raise _Refused(field, f"{quoted(value)} {reason}; {_DURATION_HELP}", reason)
    raise SpecError(field, f"{quoted(value)} is not a duration; {_DURATION_HELP}")


class _Refused(SpecError):
    """:func:`parse_duration`'s error for text in one of a duration's forms that it refuses
    (``1d1d``, ``00:99``, ``1_000``), as against text in none of them (``5x``, ``soon``):
    :func:`parse_since` and :func:`parse_time`, which read text that is no duration as a
    time, say why it is none when it is no time either (:func:`_not_a_time`).

    ``reason`` says what is wrong after an "it" (``gives the unit 'd' twice; ...``)."""

    def __init__(self, field: str, message: str, reason: str) -> None:
        super().__init__(field, message)
        self.reason = reason


def _sum_of_units(parts: list[tuple[str, str]], value: str, field: str) -> float:
    """The seconds of a duration written in units (``1h30m``: ``[("1", "h"), ("30",
    "m")]``), each unit at most once: ``1d1d`` (two days, or a slip?) is refused, naming it."""
    seen: set[str] = set()
    for _, unit in parts:
        if unit.lower() in seen:
            reason = (
                f"gives the unit {unit.lower()!r} twice; write each unit once, e.g. 1d12h or 2d"
            )
            raise _Refused(field, f"{quoted(value)} {reason}", reason)
        seen.add(unit.lower())
    return sum(float(number) * _DURATION_UNITS[unit.lower()] for number, unit in parts)


_FOUR_FIELDS = re.compile(r"^[0-9]+(?::[0-9]+){3}\Z")
"""``D:HH:MM:SS``, a form neither danlu nor Slurm reads (Slurm's is ``D-HH:MM:SS``)."""


_MAX_CLOCK_DIGITS = 400
"""More digits than a clock field of a duration within a float's range has."""


def _clock_fields(parts: list[str], value: str, field: str) -> list[int]:
    """The clock form's fields as integers (no ``int()`` of thousands of digits)."""
    if any(len(part.lstrip("0")) > _MAX_CLOCK_DIGITS for part in parts):
        _too_long(value, field)
    return [_whole(part) for part in parts]


def _check_clock(
    fields: list[int], tops: tuple[int, ...], form: str, value: str, field: str
) -> None:
    """Refuse a clock field after the first over its unit's range (``00:99`` was 99 s): the
    first field alone may be any size, as there is no unit above it to carry into."""
    if any(part > top for part, top in zip(fields, tops, strict=True)):
        names = form.removeprefix("D-").split(":")[-len(tops) :]
        ranges = ", ".join(f"{name} 0-{top}" for name, top in zip(names, tops, strict=True))
        higher = (
            "only the days may go higher"
            if form.startswith("D-")
            else "only the first field may go higher: 90:00 is 90 minutes"
        )
        reason = (
            f"is not a {form} duration: {ranges} ({higher}); or write a number with units, "
            "e.g. 1h30m"
        )
        raise _Refused(field, f"{quoted(value)} {reason}", reason)


def _seconds(total: int, value: object, field: str) -> float:
    """``total`` seconds as a float; an integer past a float's range is refused."""
    try:
        return float(total)
    except OverflowError:
        _too_long(value, field)


def _too_long(value: object, field: str) -> NoReturn:
    shown = quoted(value) if isinstance(value, str) else "a number of over 300 digits"
    reason = "is too large a duration: a duration must be a finite number of seconds"
    raise _Refused(field, f"{shown} {reason}; {_DURATION_HELP}", reason)


def format_duration(seconds: float) -> str:
    """Format seconds compactly: ``45s``, ``1h30m``, ``2d4h``; a negative duration as
    ``0s``. One of :data:`MAX_SHOWN_DAYS` days or more shows its days by their magnitude
    (``1.16e+303d`` for ``1e308``, not 300 digits); NaN and infinity as ``nans``, ``infs``."""
    if isinstance(seconds, float) and not math.isfinite(seconds):
        return "0s" if seconds < 0 else f"{seconds}s"  # -inf, as any negative duration
    left = max(0, round(seconds))  # an int, also of an integer past a float's range
    if left >= MAX_SHOWN_DAYS * 86400:
        return f"{_magnitude(left // 86400)}d"
    if left < 60:
        return f"{left}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts[:2])


MAX_SHOWN_DAYS = 100_000
"""The most days (274 years, past the 100 a spec's duration may give) that
:func:`format_duration` spells out (``99999d23h``)."""


def format_energy(joules: float) -> str:
    """Format energy in watt-hours, three significant digits: ``950`` J -> ``0.264 Wh``,
    ``2.5e6`` -> ``694 Wh``, ``1e9`` -> ``278 kWh``.

    The unit is chosen by the value as printed: 999.6 Wh rounds to 1000 and shows as
    ``1 kWh``, never ``1e+03 Wh``; past 999 MWh the MWh are printed whole (``1500 MWh``), and
    from :data:`MAX_WHOLE_MWH` by their magnitude (``2.78e+298 MWh`` for ``1e308``, not 299
    digits)."""
    wh = joules / 3600.0
    if not math.isfinite(wh):
        return f"{joules} J"
    for unit, size in (("Wh", 1.0), ("kWh", 1e3), ("MWh", 1e6)):
        value = wh / size
        shown = f"{value:.3g}"
        if abs(float(shown)) < 1000:
            return f"{shown} {unit}"
    return f"{value:.0f} MWh" if abs(value) < MAX_WHOLE_MWH else f"{value:.3g} MWh"


MAX_WHOLE_MWH = 1e9
"""The MWh from which :func:`format_energy` shows a magnitude (``1e+09 MWh``), not digits."""


_TIME_HELP = (
    "write a time, 2026-12-01T02:00 (local time unless it ends with an offset such as +00:00 "
    "or Z), a time of day, 02:00 (the next one), or a delay from now, +2h or 90m"
)
SINCE_FORMS = (
    "a duration back from now: seconds (90), units s, m, h, d (30m, 1h30m) or days-hours "
    "D-HH[:MM[:SS]] (1-12, 1-12:30:00); a time of day HH:MM or HH:MM:SS (the last one, local "
    "time: 02:00; never a duration here); or a date and time (2026-12-01, 2026-12-01T02:00; "
    "local time unless it ends with an offset such as +00:00 or Z)"
)
"""Every form :func:`parse_since` reads, for the help of the options it reads (``--since``):
a clock form ``HH:MM[:SS]`` is a time of day there, not a duration as
:func:`parse_duration` reads it."""
_SINCE_HELP = f"write {SINCE_FORMS}"
_TIME_OF_DAY = re.compile(r"^([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?$")
_MINUTES_SECONDS = re.compile(r"^\s*([0-9]+):([0-9]+)\s*$")


def _time_of_day(text: str, now: float, field: str, *, ahead: bool) -> float:
    """``HH:MM`` or ``HH:MM:SS`` (``text``, a clock form) as a local time of day: the next
    one at or after ``now`` (``ahead``), else the last one at or before it."""
    match = _TIME_OF_DAY.match(text)
    hour, minute, second = (int(part or 0) for part in match.groups()) if match else (99, 0, 0)
    if hour > 23 or minute > 59 or second > 59:
        raise SpecError(
            field,
            f"{quoted(text)} is not a time of day (HH:MM or HH:MM:SS, 00:00 to 23:59:59); "
            + (_TIME_HELP if ahead else _SINCE_HELP),
        )
    day = datetime.fromtimestamp(now).date()
    step = timedelta(days=1 if ahead else -1)
    for _ in range(3):  # today's, else tomorrow's (yesterday's); a third for a DST gap
        moment = datetime.combine(day, dt_time(hour, minute, second)).astimezone().timestamp()
        if (moment >= now) if ahead else (moment <= now):
            return moment
        day += step
    raise AssertionError("unreachable: a time of day comes round within a day")


def _moment(value: str, text: str, field: str, help_text: str, duration: _Reading) -> float:
    """An ISO 8601 date and time as POSIX seconds (local time when it has no offset).
    ``duration``: how it was read as a duration first, for the error when ``text`` is no
    time either (:func:`_not_a_time`).

    A date at the edge of what ``datetime`` holds (``0001-01-01``; ``9999-12-31`` east of
    UTC) has no local time: reading its offset steps past year 1 or 9999, and the
    ``ValueError`` or ``OverflowError`` was a traceback from ``danlu ls --since``."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise _not_a_time(value, field, help_text, str(exc), duration) from None
    try:
        return (moment if moment.tzinfo is not None else moment.astimezone()).timestamp()
    except (ValueError, OverflowError):
        raise SpecError(
            field,
            f"{quoted(value)} is too far from today to read as a local time; write a date "
            f"between the years 2 and 9998, or one with an offset (+00:00 or Z); {help_text}",
        ) from None


class _Reading(NamedTuple):
    """Text read as a duration (``noun``: ``duration`` back from now, or ``delay``), without
    a ``+``, and why :func:`parse_duration` refused it."""

    noun: str
    text: str
    error: SpecError


_NO_ISO_FORM = "Invalid isoformat string"
"""How ``datetime.fromisoformat`` begins its error for text in no ISO 8601 form, as against
one out of range (``month must be in 1..12``)."""
_DURATION_LIKE = re.compile(r"^[0-9.][0-9a-zA-Z.\s]*\Z")
"""Text written as a duration would be, digits first, then letters (``5x``, ``2w``, ``1h30``),
without a date's ``-`` or ``:``."""


def _not_a_time(
    value: str,
    field: str,
    help_text: str,
    date_reason: str,
    duration: _Reading,
) -> SpecError:
    """The error for ``value``, neither a time (``date_reason``: why ``fromisoformat``
    refused it) nor a duration (``duration``, how it was read as one), naming the reading it
    was meant as with the reason it is wrong:

    - a duration with a sign (``-5m``): a duration of 0 or more (as ``-5`` is told);
    - text in a duration's form that it refuses (``1d1d``, ``1_000s``): both readings, with
      the duration's reason;
    - a date or time out of range (``2026-13-01``): a time, with the reason;
    - text written as a duration would be (``5x``), or after a ``+``: both readings;
    - else (``soon``): a time, as before."""
    time_reason = "" if date_reason.startswith(_NO_ISO_FORM) else f" ({date_reason})"
    noun, text, error = duration
    if text.startswith("-") and _is_duration(text[1:]):
        return _below_zero(value, field, noun, help_text)
    if isinstance(error, _Refused):
        return SpecError(
            field,
            f"{quoted(value)} is neither a {noun} (it {error.reason}) nor a "
            f"time{time_reason}; {help_text}",
        )
    plainly = _DURATION_LIKE.match(text) or value.strip().startswith("+")
    if plainly and not time_reason:
        return SpecError(field, f"{quoted(value)} is neither a {noun} nor a time; {help_text}")
    return SpecError(field, f"{quoted(value)} is not a time{time_reason}; {help_text}")


def _below_zero(value: str, field: str, noun: str, help_text: str) -> SpecError:
    """The error for a ``noun`` (a duration back from now, a delay) below zero."""
    return SpecError(field, f"{quoted(value)} is not a {noun} of 0 or more; {help_text}")


def _is_duration(text: str) -> bool:
    """Whether :func:`parse_duration` reads ``text``."""
    try:
        parse_duration(text)
    except SpecError:
        return False
    return True


_BASIC_DATE = re.compile(r"^([0-9]{4})([0-9]{2})([0-9]{2})\Z")
"""Eight digits, as ISO 8601's basic date ``YYYYMMDD`` (``20261204``) is written."""


def _refuse_basic_date(
    value: str, text: str, field: str, seconds: tuple[str, str] = ("seconds back", "")
) -> None:
    """A :class:`SpecError` naming ``field`` when ``text`` is eight digits that make a date
    ``YYYYMMDD`` (``20261204``): as a bare number it read as that many seconds back (234
    days; or ahead, for :func:`parse_time`), a date almost surely meant. Other bare numbers
    (``90``, ``99999999``) pass. ``seconds``: what the number would be, and what goes before
    it to write it as that (``20261204s``; ``+`` for ``+20261204s``)."""
    match = _BASIC_DATE.match(text)
    if match is None:
        return
    year, month, day = (int(part) for part in match.groups())
    try:
        datetime(year, month, day)
    except ValueError:  # no such date (month 13, day 32, year 0): seconds, as before
        return
    raise SpecError(
        field,
        f"{quoted(value)} is ambiguous (a date YYYYMMDD, or that many {seconds[0]}?): write "
        f"{year:04d}-{month:02d}-{day:02d} for the date, or {seconds[1]}{text}s"
        " for seconds",
    )


_BARE_SECONDS = re.compile(r"^0*([0-9]{10,})(?:\.[0-9]*)?\Z")
"""A bare number of 1,000,000,000 or more (ten digits and up, a fraction allowed): a time in
POSIX seconds (``date +%s``: 1,000,000,000 is 2001-09-09) or in milliseconds, as much as a
count of seconds (31.7 years and up)."""


def _refuse_posix_seconds(
    value: str, text: str, field: str, seconds: tuple[str, str] = ("seconds back", "")
) -> None:
    """A :class:`SpecError` naming ``field`` when ``text`` is a bare number of ten digits or
    more (:data:`_BARE_SECONDS`): ``--at 1796342400`` (``date -d ... +%s``) read as a delay
    of 56 years, a drain that never came, and ``--since 1796342400`` as the epoch, every
    record since 1970. ``seconds`` as :func:`_refuse_basic_date`'s."""
    match = _BARE_SECONDS.match(text)
    if match is None:
        return
    whole = int(match.group(1)) if len(match.group(1)) <= 20 else None  # no int() of 5000
    moment = ""
    if whole is not None and whole < MAX_TIME:
        moment = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    as_time = f"the time {moment}" if moment else "a time in POSIX seconds or milliseconds"
    write = f"{moment} for the time" if moment else "a date and time (2026-12-01T02:00)"
    raise SpecError(
        field,
        f"{quoted(value)} is ambiguous ({as_time}, or that many {seconds[0]}?): write "
        f"{write}, or {seconds[1]}{text if len(text) <= 40 else 'N'}s for seconds",
    )


def parse_since(value: str, now: float, field: str = "since") -> float:
    """A moment in the past as POSIX seconds: a duration back from ``now`` (``1h``, ``30m``,
    ``2d``), a time of day ``HH:MM[:SS]`` (the last one, local time: ``02:00`` is today's
    when it has gone by, else yesterday's) or an ISO 8601 date and time (local time when it
    has no offset). A moment after ``now`` (``+2h``, tomorrow's date) is refused: nothing
    has happened since then. Raises :class:`SpecError` naming ``field``; text that is neither
    a duration nor a time gets the duration's reason when it was plainly meant as one
    (``1d1d``: the unit given twice; :func:`_not_a_time`). Eight digits that make a date,
    ``20261204``, are refused as ambiguous (:func:`_refuse_basic_date`): write
    ``2026-12-04`` or ``20261204s``; so is a bare number of ten digits or more, a POSIX time
    as ``date +%s`` prints it (:func:`_refuse_posix_seconds`): write the time, or ``Ns``.

    A moment before 1970 (``1960-01-01``, ``30000d``, ``inf``) is the epoch, 0: nothing
    danlu keeps is older, and the API refuses a ``since`` below 0 (the moment itself came
    back as a 422 about a value the user never wrote)."""
    text = value.strip()
    if text.startswith("+"):
        raise SpecError(field, f"{quoted(value)} is in the future; {_SINCE_HELP}")
    _refuse_basic_date(value, text, field)
    _refuse_posix_seconds(value, text, field)
    if _CLOCK.match(text):
        return _time_of_day(text, now, field, ahead=False)
    try:
        seconds = parse_duration(text, field)
    except SpecError as exc:
        moment = _moment(value, text, field, _SINCE_HELP, _Reading("duration", text, exc))
        if moment > now:
            raise SpecError(field, f"{quoted(value)} is in the future; {_SINCE_HELP}") from None
        return max(0.0, moment)
    if math.isnan(seconds) or seconds < 0:
        raise _below_zero(value, field, "duration", _SINCE_HELP)
    return max(0.0, now - seconds)  # an endless duration back (inf) too: the epoch


def parse_time(value: str, now: float, field: str = "time") -> float:
    """A moment as POSIX seconds: an ISO 8601 date and time (local time when it has no
    offset), a time of day ``HH:MM[:SS]`` (the next one, local time: ``02:00`` is tonight's
    once today's has gone by) or a delay from ``now`` (:func:`parse_duration`, an optional
    ``+`` before it; ``+01:00:00`` is an hour, while ``+02:00``, minutes and seconds as Slurm
    reads it or hours and minutes, is refused as ambiguous; ``++1``, one ``+`` too many,
    is refused: it was a delay of 1 s). Raises :class:`SpecError`
    naming ``field``; text that is neither a delay nor a time gets the delay's reason when it
    was plainly meant as one (``+1d1d``: the unit given twice; :func:`_not_a_time`). Eight
    digits that make a date, ``20261204``, are refused as ambiguous: write ``2026-12-04`` or
    ``+20261204s``; so is a bare number of ten digits or more (``1796342400``, a POSIX time
    that read as a delay of 56 years): write the time, or ``+Ns``.

    A moment from the year 10000 on (``+3000000d``, ``+1e20``, ``+inf``) is refused naming
    ``field``: the API refused it as a time in milliseconds, which it was not. One before
    1970 (``1960-01-01``) is the epoch, 0, a time gone by as any past one (the API refuses a
    moment below 0)."""
    text = value.strip()
    if not text.startswith("+") and _CLOCK.match(text):
        return _time_of_day(text, now, field, ahead=True)
    if not text.startswith("+"):
        _refuse_basic_date(value, text, field, ("seconds from now", "+"))
        _refuse_posix_seconds(value, text, field, ("seconds from now", "+"))
    delay = text[1:] if text.startswith("+") else text
    if text.startswith("+") and delay.lstrip().startswith("+"):  # float() read "+1" on
        raise SpecError(
            field,
            f"{quoted(value)} has more than one '+': write one before the delay; {_TIME_HELP}",
        )
    two_parts = _MINUTES_SECONDS.match(delay)
    if two_parts is not None:
        first, second = _clock_fields(list(two_parts.groups()), value, field)
        as_minutes = format_duration(first * 60 + second)
        as_hours = format_duration(first * 3600 + second * 60)
        raise SpecError(
            field,
            f"{quoted(value)} is ambiguous (minutes and seconds, or hours and minutes?): write "
            f"+{as_minutes} or +{as_hours}",
        )
    try:
        seconds = parse_duration(delay, field)
    except SpecError as exc:
        return _within_years(
            _moment(value, text, field, _TIME_HELP, _Reading("delay", delay, exc)), value, field
        )
    if math.isnan(seconds) or seconds < 0:
        raise _below_zero(value, field, "delay", _TIME_HELP)
    return _within_years(now + seconds, value, field)


def _within_years(moment: float, value: str, field: str) -> float:
    """``moment`` (POSIX seconds) as :func:`parse_time` gives it: 0 for one before 1970, a
    :class:`SpecError` naming ``field`` for one from the year 10000 on (:data:`MAX_TIME`)."""
    if moment >= MAX_TIME:
        raise SpecError(
            field,
            f"{quoted(value)} lies past the year 9999, later than any time danlu keeps: write "
            f"a time before 10000-01-01, or a shorter delay; {_TIME_HELP}",
        )
    return max(0.0, moment)
