"""Byte-size parsing and formatting ("20GiB", "512MB", 1024)."""

from __future__ import annotations

import math
import re

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
    """Format a byte count with a binary unit, e.g. ``80.0GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.1f}{unit}" if unit != "B" else f"{int(size)}B"
        size /= 1024
    return f"{size:.1f}TiB"
