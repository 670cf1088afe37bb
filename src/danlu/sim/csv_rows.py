"""A check shared by the simulator's CSV readers (workloads, trace tables)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from danlu.core.errors import DataError


def check_no_extra_values(
    path: Path, line: int, width: int, extra: Sequence[object], fix: str
) -> None:
    """Refuse (:class:`DataError` naming ``path`` and ``line``) a row with a value among
    ``extra``, its fields beyond the header's ``width`` columns (empty ones are fine: a
    spreadsheet's trailing commas). Some field before them is one too many (an unquoted
    comma, a column missing from the header), and every value after it would be read in
    the next column, silently. ``fix`` ends the message (how to write the row)."""
    values = [str(field).strip() for field in extra]
    if any(values):
        shown = ",".join(values)
        shown = shown if len(shown) <= 40 else f"{shown[:40]}..."
        raise DataError(
            f"{path}:{line}: {width + len(values)} fields but the header has {width} columns "
            f"(beyond them: {shown!r}); a field too many shifts the values after it into the "
            f"wrong columns: {fix}"
        )
