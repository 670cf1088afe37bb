"""The JSONL metrics file: appended whole requests at a time, under a lock, mended after a
crash, and cut back to a checkpoint's step when a run resumes from it.

Every change to the file is made holding an exclusive ``flock`` on it, so that two writers
(two runs started in one directory share ``danlu-metrics.jsonl``; a relaunch whose old
process is still exiting) never cut or interleave each other's lines:

- :func:`append_lines` appends a request's lines, all or none of them: a write that fails
  part way (a full disk) is cut back to where the file ended. Before it writes, a last line
  without its line end, which only a writer killed part way through leaves (every write
  is made under the lock), is mended: cut off when it is half a record, ended with a line
  end when it is a whole one.
- :func:`cut_after_step` takes off the file's end the records of steps after a checkpoint's
  step, which the run resumed from it redoes and writes again (each step's record once).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
from pathlib import Path

log = logging.getLogger("danlu.train")

_BLOCK = 1 << 16
"""Bytes read at a time from the file's end."""

MAX_TAIL = 1 << 20
"""The longest last line without a line end that is mended by cutting it off; a longer one
is no record this reporter wrote part of, and is only ended with a line end."""


def _read_at(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes of ``fd`` at ``offset`` (fewer at the file's end)."""
    parts: list[bytes] = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _line_start(fd: int, end: int, limit: int) -> int | None:
    """Where the line that ends at ``end`` starts (just after the line end before it, or 0),
    looking back at most ``limit`` bytes; ``None`` when it starts before that."""
    position = end
    while position > 0 and end - position < limit:
        start = max(0, position - _BLOCK)
        found = _read_at(fd, position - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        position = start
    return 0 if position == 0 else None


def _is_record(line: bytes) -> bool:
    """True when ``line`` is a whole JSON object (a record)."""
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, UnicodeDecodeError):
        return False


def _mend(fd: int, path: Path) -> bytes:
    """Mend a last line without its line end (:attr:`fd` locked): cut it off when it is half
    a record (the file ends where the last whole line does), else return the line end to
    write before the next line. Before, the next record was appended to the half line: one
    line no JSON reader took, the new record lost with it."""
    end = os.lseek(fd, 0, os.SEEK_END)
    if end == 0 or _read_at(fd, 1, end - 1) == b"\n":
        return b""
    start = _line_start(fd, end, MAX_TAIL)
    if start is None or _is_record(_read_at(fd, end - start, start)):
        return b"\n"
    os.ftruncate(fd, start)
    log.warning(
        "the metrics file %s ended in half a record (%d bytes, left by a run killed as it "
        "wrote): cut off, the file ends with its last whole record",
        path,
        end - start,
    )
    return b""


def _open_locked(path: Path, flags: int) -> int:
    """``path`` opened with ``flags`` and locked for this writer alone (``flock``: released
    as the file is closed, or as a writer killed with it open dies). A filesystem that has
    no locks (``flock`` refused as not supported there, some FUSE and network mounts) is
    written without one, as before: the common single writer needs none."""
    fd = os.open(path, flags, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as exc:
        if exc.errno not in _NO_LOCKS:
            os.close(fd)
            raise
    except BaseException:
        os.close(fd)
        raise
    return fd


_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS}
"""What ``flock`` answers on a filesystem without locks."""


def append_lines(path: Path, lines: list[str]) -> None:
    """Append ``lines`` to the JSONL file ``path``, all or none of them, holding its lock: a
    write that fails part way (a full disk, a file size limit) cuts the file back to where
    it ended, so the request, kept for the next flush, is written once, whole (before, the
    part written stayed: a half line, and the records before it twice once the request was
    written again). The lock keeps another writer's lines out of that part: cutting back
    to the end read before the write took away the lines another writer appended since. A
    last line left without its line end is mended first (:func:`_mend`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(line + "\n" for line in lines).encode()
    try:
        fd = _open_locked(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        readable = True
    except PermissionError:  # a file this job may write but not read: appended as before
        fd, readable = _open_locked(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), False
    try:
        prefix = b""
        if readable:
            with contextlib.suppress(OSError):  # a pipe, a device: nothing to mend
                prefix = _mend(fd, path)
        data = memoryview(prefix + text)
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(fd, data) :]
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)
            raise
    finally:
        os.close(fd)


def _step(line: bytes) -> int | None:
    """The ``step`` of the record ``line``; ``None`` when it is no record with a whole step."""
    try:
        record = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


RESUMED = "the step this run resumes from (the run before it went on past its checkpoint)"
"""What the step of :func:`cut_after_step` is, for its WARNING: a resume's checkpoint."""
ROLLED_BACK = "the checkpoint's this run rolled back to (an anomaly)"
"""The step of :func:`cut_after_step` of a rollback."""


def cut_after_step(path: Path, step: int, what: str = RESUMED) -> int:
    """Take off the end of the JSONL file ``path`` its records of steps after ``step`` (a
    checkpoint's, which a run resumes from and redoes those steps: before, their records
    were in the file twice, the old run's then the new's); returns how many. Only the
    file's last lines are taken, back to the first that is not a record of a later step (an
    earlier step's, a line that is no record): a file of other lines is left as it is. A
    half line at the end (a killed writer's) goes with them. Nothing when there is no file.
    ``what`` says in the WARNING what ``step`` is (:data:`RESUMED`, :data:`ROLLED_BACK`)."""
    try:
        fd = _open_locked(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        kept, count = end, 0
        if end and _read_at(fd, 1, end - 1) != b"\n":  # a last line without its line end
            start = _line_start(fd, end, MAX_TAIL)
            if start is None:
                return 0
            line = _read_at(fd, end - start, start)
            found = _step(line)
            if _is_record(line) and (found is None or found <= step):
                return 0  # a record to keep (its line end is mended by the next append)
            count += found is not None  # a record of a later step, else half a line
            kept = start
        while kept > 0:
            start = _line_start(fd, kept - 1, MAX_TAIL)  # kept - 1: the line's line end
            if start is None:
                break
            found = _step(_read_at(fd, kept - 1 - start, start))
            if found is None or found <= step:
                break
            count += 1
            kept = start
        if kept < end:
            os.ftruncate(fd, kept)
        if count:
            log.warning(
                "the metrics file %s held %d records of steps after %d, %s: taken off, the "
                "steps' records are written again as they are redone",
                path,
                count,
                step,
                what,
            )
        return count
    finally:
        os.close(fd)
