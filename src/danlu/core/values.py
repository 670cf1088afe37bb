"""The guard on values a request may carry into the store: finite numbers, integers within
64 bits, no NUL characters (PostgreSQL's text and JSON take none of the three)."""

from __future__ import annotations

import math
from typing import Any

from danlu.core.errors import SpecError

MAX_INT = 2**62
"""Largest magnitude of an integer accepted anywhere (64-bit columns stay safe)."""


def quoted(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut short: an error message quotes the input, not all of it."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_values(data: Any, path: str = "") -> None:
    """Reject what the store cannot hold: non-finite numbers, integers beyond 2**62, NUL
    characters in strings or keys (:class:`SpecError` naming the field, ``path`` dotted)."""
    if isinstance(data, bool) or data is None:
        return
    if isinstance(data, float):
        if not math.isfinite(data):
            raise SpecError(path, "must be a finite number")
    elif isinstance(data, int):
        if abs(data) > MAX_INT:
            raise SpecError(path, f"must be between -2**62 and 2**62 (got {quoted(data)})")
    elif isinstance(data, str):
        if "\0" in data:
            raise SpecError(path, "must not contain NUL characters")
    elif isinstance(data, dict):
        for key, value in data.items():
            sub = f"{path}.{key}" if path else str(key)
            if "\0" in str(key):
                raise SpecError(path or "body", "keys must not contain NUL characters")
            check_values(value, sub)
    elif isinstance(data, list | tuple):
        for i, value in enumerate(data):
            check_values(value, f"{path}.{i}" if path else str(i))
