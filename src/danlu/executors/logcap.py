"""A cap on the size of a run's log (``DANLU_LOG_MAX_MB``), kept by the one process of the
run that holds the log while the job writes to it.

A local job's stdout and stderr are its log file's descriptor (opened ``O_APPEND``), so a
job printing in a loop would fill the disk. Its supervisor (:mod:`danlu.executors.supervise`)
checks the log's size at each heartbeat (:class:`LogCap`): past the cap, the log's newest
part is copied to ``JOB_ID.log.1`` and the log truncated to one line saying so. A Slurm
run's log (``sbatch --output``, ``--open-mode=append``) is capped so by the per-node task of
its first node (:mod:`danlu.executors.slurm_task`), a Ray run's by the control plane as it
appends the actors' output (:mod:`danlu.executors.ray_output`).

Standard library only: the supervisor and the Slurm task run as plain scripts under
``python -I`` and load this file next to them.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any, BinaryIO

LOG_KEEP_MAX_BYTES = 256 * 1024**2
"""The most bytes of a capped log kept in its ``.1`` file (:class:`LogCap`)."""
LOG_CAP_MIN_BYTES = 1024
"""The least cap a launch record's ``log_max_bytes`` sets (one below is this)."""
_CHUNK = 1 << 20
_CATCH_UP = 3
"""How many times :meth:`LogCap._keep` copies what the job wrote during its copy."""

Replacing = Callable[[Path], AbstractContextManager[BinaryIO]]
"""Opens a new file that atomically replaces the path once the block ends
(:func:`danlu.executors.supervise.atomic_file`)."""


def log_cap_bytes(spec: dict[str, Any]) -> int | None:
    """The launch record's ``log_max_bytes`` (at least :data:`LOG_CAP_MIN_BYTES`); None
    when it has none, or 0 (no cap), or one that is not a whole number."""
    value = spec.get("log_max_bytes")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return max(value, LOG_CAP_MIN_BYTES)
    return None


class LogCap:
    """Keeps the job's log, open as descriptor ``fd`` (the supervisor's stdout, which the
    job's stdout and stderr are: opened ``O_APPEND``), under ``cap`` bytes: :meth:`check`
    (at each heartbeat) finds it past the cap, copies its last part (half the cap, at most
    :data:`LOG_KEEP_MAX_BYTES`, from a line's start) to ``NAME.1`` next to it at ``path``
    (replacing the one there, atomically, through ``replacing``), truncates the log to
    nothing and writes one line saying so (:meth:`note`); the job's appends go on at its new
    end. Readers following the log (``danlu logs -f``) see it shrink and read it again from
    its start. What the job writes between the copy and the truncation is lost, and the log
    may pass the cap by what the job writes in one heartbeat. Nothing here raises: a copy
    that fails (a full disk) truncates all the same, and the line says the older part was
    not kept. ``warn`` says why a check failed (default: a line on stderr, which is the log
    for the supervisor)."""

    def __init__(
        self,
        fd: int,
        cap: int,
        path: Path,
        replacing: Replacing,
        warn: Callable[[str], object] | None = None,
    ) -> None:
        self.fd = fd
        self.cap = cap
        self.path = path
        self.kept = path.with_name(f"{path.name}.1")
        self._replacing = replacing
        self._warn = warn or _said_on_stderr

    @classmethod
    def of(
        cls,
        spec: dict[str, Any],
        replacing: Replacing,
        fd: int = 1,
        warn: Callable[[str], object] | None = None,
    ) -> LogCap | None:
        """The cap of the launch record ``spec`` (:func:`log_cap_bytes`) on descriptor
        ``fd``; None when it sets none, or ``fd`` is not the file at its ``log_path`` (the
        supervisor run in-process, as the tests do, or started by hand: its stdout is some
        other file, not to be truncated)."""
        cap = log_cap_bytes(spec)
        path = spec.get("log_path")
        if cap is None or not isinstance(path, str):
            return None
        try:
            mine, there = os.fstat(fd), os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISREG(mine.st_mode) or not _same_file(mine, there):
            return None
        return cls(fd, cap, Path(path), replacing, warn)

    def note(self, not_kept: str | None = None) -> str:
        """The line that starts the log once it was truncated: why, and where its older
        part is (``not_kept`` None), else why it was not kept."""
        where = not_kept or f"its older part is in {self.kept.name}"
        return f"[danlu: the log passed its cap of {self.cap} bytes (DANLU_LOG_MAX_MB); {where}]\n"

    def check(self) -> bool:
        """Truncate the log when it is past the cap (see the class); whether it did."""
        try:
            size = os.fstat(self.fd).st_size
            if size <= self.cap:
                return False
            not_kept = self._keep(size)
            os.ftruncate(self.fd, 0)
            os.write(self.fd, self.note(not_kept).encode())
        except OSError as exc:
            self._warn(f"cannot cap the log: {exc}")
            return False
        return True

    def _keep(self, size: int) -> str | None:
        """Copy the log's last part to :attr:`kept`; None once done, else why it was not.
        What the job wrote meanwhile is copied too (up to :data:`_CATCH_UP` times), and the
        file is not fsync'ed (``replacing``): the log is truncated right after, and output
        written in between is lost."""
        keep = min(self.cap // 2, LOG_KEEP_MAX_BYTES)
        start = max(size - keep, 0)
        try:
            # the descriptor's own file, whatever is at its name now (reopened: the
            # descriptor was opened for appending only)
            with open(f"/proc/self/fd/{self.fd}", "rb") as log:
                if not _same_file(os.fstat(log.fileno()), os.fstat(self.fd)):
                    return "its older part could not be read, and was not kept"
                log.seek(start)
                first = log.read(min(size - start, _CHUNK))
                if start > 0 and b"\n" in first:  # from the start of a line
                    first = first[first.index(b"\n") + 1 :]
                with self._replacing(self.kept) as out:
                    out.write(first)
                    for _ in range(_CATCH_UP):
                        end = os.fstat(self.fd).st_size  # the job's output since, too
                        if log.tell() >= end:
                            break
                        while (left := end - log.tell()) > 0 and (
                            chunk := log.read(min(left, _CHUNK))
                        ):
                            out.write(chunk)
        except OSError as exc:
            return f"its older part was not kept ({exc.strerror or exc})"
        return None


def _said_on_stderr(message: str) -> None:
    with suppress(OSError):  # (stderr is the supervisor's log: it may be what failed)
        print(f"danlu supervisor: {message}", file=sys.stderr, flush=True)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
