"""What the simulator's CSV readers (workloads, pod and node lists, trace tables) share."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from danlu.core.errors import DataError

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
"""The columns an openb node list (``danlu sim pack --nodes``) must have."""

POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
"""The columns an openb pod list (``danlu sim pack --pods``) must have."""


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


def column_names(first: Sequence[str]) -> list[str]:
    """A CSV header's column names, stripped of spaces and in lower case
    (``Name, Submit_Time`` is ``name,submit_time``), as every reader of the simulator takes
    them (workloads, pod and node lists): every format's columns are lower case, and a
    spreadsheet's ``Name`` was refused as an unrecognised header while an optional
    ``Project`` was ignored, every job then in project ``default`` (a pod list's
    ``CPU_Milli`` was refused as a missing column, its ``GPU_Spec`` ignored). A name whose
    lower case the header also has as written (``Name`` beside ``name``) is kept as it is,
    an extra column, as before."""
    names = [name.strip() for name in first]
    written = set(names)
    return [name if name.lower() in written else name.lower() for name in names]


MAX_LINE_CHARS = 1 << 20
"""The most characters a line of a CSV file the simulator reads may hold (its line break
aside): a million, where a workload's or a pod list's rows hold well under a thousand. A
file without line breaks (``--workload /dev/zero``, a binary or compressed file that
happens to decode) used to be read whole as its first line, for ever or until memory ran
out."""


MAX_LINES = 5_000_000
"""The most lines a CSV file the simulator reads may have (its header and blank lines
included): public GPU-cluster traces hold up to a few million jobs (the Pollux artifact's
Philly copy: 82,247), and each row loaded takes about a kilobyte of memory. A file of
endless rows (a FIFO or ``/dev/stdin`` fed by a generator) used to be read for ever, or
until memory ran out: only each line's length was bounded."""


def bounded_lines(handle: TextIO, path: Path, what: str) -> Iterator[str]:
    """The lines of ``handle`` (opened with ``newline=""``, line breaks kept), as
    :func:`csv.reader` reads them, each read at most :data:`MAX_LINE_CHARS` characters at a
    time, and at most :data:`MAX_LINES` of them: a longer line, or one more line, is a
    :class:`DataError` naming ``path``, the line and ``what`` (the file's role and its
    flag, e.g. ``a workload (--workload)``), instead of a read that never ends.
    Undecodable bytes raise the handle's :class:`UnicodeDecodeError` as iterating it
    does."""
    line = 0
    while text := handle.readline(MAX_LINE_CHARS + 2):  # room for the line's "\r\n"
        line += 1
        if line > MAX_LINES:
            raise DataError(
                f"{path}:{line}: more than {MAX_LINES:,} lines; {what} is read whole before "
                "the run, so an endless or oversized file cannot be simulated: give a file "
                f"of at most {MAX_LINES:,} lines (split a longer trace, or keep a window of it)"
            )
        if len(text.rstrip("\r\n")) > MAX_LINE_CHARS:
            raise DataError(
                f"{path}:{line}: a line longer than {MAX_LINE_CHARS:,} characters (no line "
                f"break within them); {what} must be a CSV text file with one row per line: "
                "check that this is the file you meant"
            )
        yield text
