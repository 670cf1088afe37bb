"""A workload file read as CSV rows (:func:`workload_rows`): opened as UTF-8 text, its
header checked (not empty, no column twice), each row given with the line it starts on, and
the errors of a file that cannot be read naming the file, the line and the fix."""

from __future__ import annotations

import codecs
import contextlib
import csv
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from danlu.core.errors import DataError
from danlu.sim.csv_rows import bounded_lines, check_no_extra_values, column_names

Rows = Iterator[tuple[int, dict[str, str]]]
"""A workload file's rows, each with the line it starts on (:func:`workload_rows`)."""

WORKLOAD_FLAG = "--workload"
"""The ``danlu sim`` option that gives a workload file, named in the errors of
:func:`~danlu.sim.workload.load_workload` (its only caller in the CLI)."""


@contextlib.contextmanager
def workload_rows(path: Path) -> Iterator[tuple[list[str], Iterator[tuple[int, dict[str, str]]]]]:
    """Open ``path`` for as long as the ``with`` block lasts, giving the header's column
    names and the rows, each with the line of the file it starts on (blank lines are
    skipped but counted; a row with a quoted field that spans lines is reported where it
    starts), names and fields stripped of spaces (``name, submit_time``); a UTF-8
    byte-order mark is skipped. As :class:`csv.DictReader`, a field missing at the end of a
    short row is None; empty fields beyond the header (a spreadsheet's trailing commas) are
    dropped, and a row with a value beyond it is refused: a field too many before them
    shifts every value after it into the next column (``j1,0,2,1,3600`` under
    ``name,submit_time,gpus,duration`` ran for 1 s, its 3600 silently dropped). The file is
    closed when the block ends, whether the rows were all read or an error stopped it (it
    used to stay open after an unrecognised header, until garbage collection).

    Raises:
        DataError: the file cannot be read, is empty, or its header is blank or repeats a
            column, or a row has a value beyond the header's columns, or a line is longer
            than :data:`~danlu.sim.csv_rows.MAX_LINE_CHARS` (``/dev/zero`` was read for
            ever); the message names the file (and the row's line).
    """
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        # the flag too, as the line-length errors name it: the path alone named no option
        reason = exc.strerror or exc
        raise DataError(f"cannot read workload {path} ({WORKLOAD_FLAG}): {reason}") from None
    with handle:
        reader = csv.reader(bounded_lines(handle, path, f"a workload ({WORKLOAD_FLAG})"))
        try:
            first = next(reader, None)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise DataError(_unreadable(path, 1, exc)) from None
        if not first:
            example = "name,submit_time,gpus,duration"
            if first is None:
                raise DataError(f"{path}: empty file, expected a header line such as {example}")
            raise DataError(f"{path}, line 1: blank; the first line must be the header ({example})")
        header = column_names(first)
        repeated = repeated_columns(header)
        if repeated:
            raise DataError(repeated_message(path, repeated))

        def rows() -> Iterator[tuple[int, dict[str, str]]]:
            start = reader.line_num + 1  # the line the next row starts on
            try:
                for fields in reader:
                    if fields:  # a blank line reads as no fields
                        extra = fields[len(header) :]
                        check_no_extra_values(path, start, len(header), extra, _ROW_FIX)
                        row: dict[str, Any] = dict.fromkeys(header[len(fields) :])  # short: None
                        row.update(zip(header, (f.strip() for f in fields), strict=False))
                        yield start, row
                    start = reader.line_num + 1
            except (UnicodeDecodeError, csv.Error) as exc:
                raise DataError(_unreadable(path, start, exc)) from None

        yield header, rows()


_ROW_FIX = "quote a value holding a comma, or name every column in the header"
"""How a workload row with a value beyond its header is written instead."""


def repeated_columns(header: Sequence[str]) -> list[str]:
    """The column names a CSV header has more than once (empty ones aside), in order."""
    counts = Counter(name for name in header if name)
    return [name for name, n in counts.items() if n > 1]


def repeated_message(path: Path, repeated: Sequence[str]) -> str:
    """The error for a header with ``repeated`` columns: a row would keep only one."""
    names = ", ".join(repr(name) for name in repeated)
    return (
        f"{path}, line 1: column(s) {names} appear more than once in the header; "
        "keep one of each (a row would silently keep only one of the values)"
    )


def _unreadable(path: Path, line: int, exc: Exception) -> str:
    """The message for a workload file that is not UTF-8 CSV text: on ``line``, the line
    the CSV reader was on, or for a byte that is not UTF-8 the line that byte is on (the
    reader decodes 8 KiB at a time, ahead of the line it reads)."""
    if isinstance(exc, UnicodeDecodeError):
        line = undecodable_line(path) or line
    return f"{path}:{line}: not a UTF-8 CSV file ({exc}); save the workload as UTF-8 text"


def undecodable_line(path: Path) -> int | None:
    """The line (from 1) of the first byte of ``path`` that is not UTF-8, counting the
    newlines before it; None if every byte is (or the file cannot be read)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                pending = len(decoder.getstate()[0])  # bytes of a character cut at the end
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as exc:  # its start counts the pending bytes too
                    return line + chunk[: max(exc.start - pending, 0)].count(b"\n")
                line += chunk.count(b"\n")
            decoder.decode(b"", final=True)  # a character cut short by the file's end
    except UnicodeDecodeError:
        return line
    except OSError:
        return None
    return None
