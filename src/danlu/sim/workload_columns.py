"""A workload header's columns judged against the formats' (:mod:`danlu.sim.workload`): the
format nearest a header that fits none, a plain (``danlu`` format) column that is a typo of
one the format reads, the plain columns it does not read, and a time written as a duration
where the format wants seconds. Each names the file, line and column, and the fix."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from danlu.core.errors import DataError, SpecError
from danlu.core.units import parse_duration
from danlu.core.values import plain_float

PLAIN_COLUMNS = (
    "name",
    "submit_time",
    "gpus",
    "duration",
    "priority",
    "gpu_memory",
    "family",
    "model",
    "project",
    "time_limit",
    "user",
)
"""Every column the plain (``danlu``) format reads, the required ones first."""

TYPO_CUTOFF = 0.75
"""How alike (:class:`difflib.SequenceMatcher` ratio) a plain workload's column must be to a
column of :data:`PLAIN_COLUMNS` its header lacks to be taken for a typo of it
(``projct``: 0.92, ``timelimit``: 0.95, ``gpu_mem``: 0.82; ``notes`` is like none)."""


def nearest_format(columns: set[str], formats: Mapping[str, frozenset[str]]) -> str:
    """The end of the error for a header that fits no format: the format whose required
    columns it has most of and the ones it lacks (``; nearest: the danlu format, which
    also needs gpus``), or empty when it has none of any format's (or as many of two)."""
    held = {name: len(required & columns) for name, required in formats.items()}
    most = max(held.values(), default=0)
    nearest = [name for name, count in held.items() if count == most]
    if not most or len(nearest) > 1:
        return ""
    name = nearest[0]
    lacking = ", ".join(sorted(formats[name] - columns))
    return f"; nearest: the {name} format, which also needs {lacking}"


def unread_plain_columns(path: Path, header: Sequence[str]) -> tuple[str, ...]:
    """The columns of a plain workload's ``header`` that the format does not read (a
    ``notes`` column), in order, to be named in a note: they change nothing. One that is
    a typo of a column the header lacks (``projct`` for ``project``, ``timelimit`` for
    ``time_limit``) is refused (:class:`DataError` naming the file, the column and the
    fix): it was ignored, every job then in project ``default`` or without a limit, and
    the results looked as if it had been read."""
    lacking = [name for name in PLAIN_COLUMNS if name not in header]
    unread: list[str] = []
    for column in header:
        if not column or column in PLAIN_COLUMNS:
            continue
        meant = difflib.get_close_matches(column, lacking, n=1, cutoff=TYPO_CUTOFF)
        if meant:
            raise DataError(
                f"{path}, line 1: column {column!r} is not read by the danlu format; did "
                f"you mean {meant[0]!r}? Rename the column (the format reads "
                f"{', '.join(PLAIN_COLUMNS)})"
            )
        unread.append(column)
    return tuple(unread)


def refuse_duration_text(row: Mapping[str, str | None], column: str, path: Path, line: int) -> None:
    """Refuse a column of seconds written as a duration (``3h``, ``90m``, ``04:00:00``), as
    a spec's ``time_limit`` may be written, naming the seconds to write instead: the
    error said only that it must be a number. Anything else is left to the caller."""
    text = (row.get(column) or "").strip()
    try:
        plain_float(text)
        return  # a number (or empty): the caller reads it
    except ValueError:
        pass
    try:
        seconds = parse_duration(text, column)
    except SpecError:
        return  # no duration either: the caller's error
    if not (math.isfinite(seconds) and seconds >= 0):  # (inf, nan: the caller's error)
        return
    raise DataError(
        f"{path}:{line}: column {column!r} is seconds, written as a plain number; got "
        f"{text!r}: write {seconds:g}"
    )
