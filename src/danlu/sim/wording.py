"""How the simulator and ``danlu sim`` write a count of things in their messages."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, the noun with an ``s`` unless the count is one: ``1 node``,
    ``4 nodes``, ``0 GPUs`` (``1 nodes`` was printed)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
