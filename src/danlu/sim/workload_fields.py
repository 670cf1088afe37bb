"""The fields of a workload file's rows read as the formats want them (whole numbers, numbers,
seconds, job names), each error naming the file, the line, the column and the fix; and the
bounds on those values that the simulator's other readers share."""

from __future__ import annotations

import math
from pathlib import Path

from danlu.core.errors import DataError
from danlu.core.values import plain_float
from danlu.sim.workload_columns import refuse_duration_text


def whole_number(
    row: dict[str, str], column: str, path: Path, line: int, least: int, most: int
) -> int:
    """A column holding a whole number from ``least`` to ``most`` (2.5 GPUs used to be read
    as 2, and ``1e300`` GPUs was taken as asked). A negative or infinite value gets this
    message too (it was told ``must be >= 0``, and then 0 was refused as below ``least``)."""
    value = number(row, column, path, line)
    if not (math.isfinite(value) and value.is_integer()) or value < least:
        raise DataError(
            f"{path}:{line}: column {column!r} must be a whole number >= {least}, got "
            f"{row[column]!r}"
        )
    if value > most:
        raise DataError(
            f"{path}:{line}: column {column!r} must be at most {most:,}, got {row[column]!r}"
        )
    return int(value)


def nonnegative_number(row: dict[str, str], column: str, path: Path, line: int) -> float:
    """The number in ``column`` (finite, >= 0), or a :class:`DataError` naming the file,
    line and column (:func:`number`), and the rule as a whole: an infinite value was told
    only ``must be >= 0, got inf``, which it is."""
    value = number(row, column, path, line)
    if not math.isfinite(value) or value < 0:
        raise DataError(
            f"{path}:{line}: column {column!r} must be >= 0 and finite, got {row[column]!r}"
        )
    return value


def number(row: dict[str, str], column: str, path: Path, line: int) -> float:
    """The number in ``column`` (any float, NaN and infinities too), or a
    :class:`DataError` naming the file, line and column: also for a row too short to reach
    the column (its field is None, which raised a bare AttributeError)."""
    if column in row and row[column] is None:
        lacks = ", ".join(repr(name) for name, value in row.items() if value is None)
        raise DataError(
            f"{path}:{line}: column {column!r} is missing: the row has fewer fields than the "
            f"header (it lacks {lacks}); give every row a value for each column (empty ones "
            "separated by commas)"
        )
    try:
        value = plain_float(row[column])
    except (KeyError, TypeError, ValueError):
        raise DataError(
            f"{path}:{line}: column {column!r} must be a number (digits 0-9, no '_'), got "
            f"{row.get(column)!r}"
        ) from None
    return value


MAX_CPU_MILLI = 1_000_000_000
"""Most CPU an openb node may have, or a pod ask for: a million cores (the openb lists: 128)."""

MAX_MEMORY_MIB = 1 << 30
"""Most host memory an openb node may have, or a pod ask for: 1 PiB (the openb lists: 1 TiB).
With these bounds every sum over a cluster stays well within 64-bit integers (larger
values crashed the run with OverflowError)."""

MOST_SECONDS = 1e12
"""The largest time a plain workload's ``submit_time``, ``duration`` or ``time_limit`` may
have, in seconds (over 30,000 years; the simulated clock still steps by
:data:`~danlu.sim.config.MIN_INTERVAL` there): a larger one is in a smaller unit. Epoch
seconds (about 1.7e9) are within it; epoch milliseconds of any date since 2001 (1e12 and
more), microseconds and nanoseconds (about 1.7e18) are not."""

_SMALLER_UNITS = (("milliseconds", 1e3), ("microseconds", 1e6), ("nanoseconds", 1e9))


def seconds(row: dict[str, str], column: str, path: Path, line: int) -> float:
    """A column of seconds (:func:`nonnegative_number`) of at most :data:`MOST_SECONDS`; a
    larger value is refused naming the units it looks like, and so is a duration (``3h``),
    naming the seconds to write."""
    refuse_duration_text(row, column, path, line)
    value = nonnegative_number(row, column, path, line)
    if value <= MOST_SECONDS:
        return value
    units = [name for name, per_second in _SMALLER_UNITS if value / per_second <= MOST_SECONDS]
    listed = " or ".join([", ".join(units[:-1]), units[-1]] if len(units) > 1 else units)
    looks = f"looks like {listed}" if units else "is no time in seconds"
    raise DataError(
        f"{path}:{line}: column {column!r} is seconds; {value:g} (over 30,000 years) {looks}: "
        f"give the times in seconds (at most {MOST_SECONDS:g})"
    )


def job_name(row: dict[str, str], path: Path, line: int) -> str:
    """The job's name: the ``name`` column, which must not be empty (results name jobs by it)."""
    name = row.get("name") or ""
    if not name.strip():
        raise DataError(f"{path}:{line}: column 'name' is empty; give every job a name")
    return name


class JobNames:
    """The job names of a workload file read so far, each with the line it is on."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lines: dict[str, int] = {}

    def add(self, name: str, line: int) -> None:
        """Refuse a job name used on an earlier line, naming both lines (the jobs'
        places among the jobs kept were named, which are not the file's rows when an
        openb list's CPU-only or never-scheduled pods come before them)."""
        first = self._lines.setdefault(name, line)
        if first != line:
            raise DataError(
                f"{self._path}:{line}: job name {name!r} is used twice (lines {first} and "
                f"{line}); give every job its own name"
            )
