"""Small helpers shared by the services."""

from __future__ import annotations

import time


def resolve_now(now: float | None) -> float:
    """``now`` if given, else the wall clock (POSIX seconds)."""
    return time.time() if now is None else float(now)
