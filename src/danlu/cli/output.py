"""Writing a job's output bytes to stdout (``danlu logs``, ``danlu run``), and what is done
once stdout cannot be written: its reader gone (``danlu logs JOB | head``), a full disk."""

from __future__ import annotations

import io
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import typer

PIPE_CLOSED = 128 + signal.SIGPIPE
"""The exit code once the reader of the output has gone, as a shell gives a command killed
by SIGPIPE (141)."""


def buffered_stdout() -> None:
    """Give stdout a buffer where it has none (``PYTHONUNBUFFERED`` set, as many container
    images set it): unbuffered, a write that its pipe's reader leaves part-done (``danlu ls
    --json | head -1`` on a long list, the reader gone mid-write) returns how much went,
    and the text layer dropped the rest without an error, so the command exited 0 having
    lost its output. A buffer writes on until all is written, or raises
    :class:`BrokenPipeError` (exit :data:`PIPE_CLOSED`). Line-buffered, so that each line
    still goes out as it is printed; the file descriptor is stdout's, left open."""
    stream = sys.stdout
    if not isinstance(getattr(stream, "buffer", None), io.RawIOBase):
        return  # buffered already, or not a file (a test's stream)
    try:
        raw = io.FileIO(stream.fileno(), "w", closefd=False)
    except (OSError, ValueError):
        return
    stream.flush()
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=True,
    )


def write_bytes(data: bytes) -> None:
    """``data`` on stdout as it is, now (a job's output need not be UTF-8): after any text
    written before it, to the byte stream beneath (the text itself, bytes not UTF-8 each
    as U+FFFD, where stdout has none)."""
    sys.stdout.flush()
    raw = getattr(sys.stdout, "buffer", None)
    if raw is None:
        sys.stdout.write(data.decode("utf-8", errors="replace"))
        sys.stdout.flush()
        return
    raw.write(data)
    raw.flush()


def quiet_stdout() -> None:
    """Point stdout at the null device once its reader has gone (or it cannot be written),
    so that flushing what is left in its buffer at exit raises no second error."""
    _point_at_null(sys.stdout)


def quiet_stderr() -> None:
    """:func:`quiet_stdout` for stderr (``2>/dev/full``): what is left in its buffer is
    dropped at exit, where a failed flush would replace the command's exit code with 1."""
    _point_at_null(sys.stderr)


def _point_at_null(stream: TextIO) -> None:
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's stream)
        pass


@contextmanager
def stderr_written() -> Iterator[None]:
    """An error line or note written to stderr inside, whose failure (``2>/dev/full``, its
    reader gone) is let go: there is nowhere left to say so, and the command ends as it
    would have with the line written (``error: ...`` and exit 2, not a traceback and 1).
    Wrap only writes to stderr."""
    try:
        yield
    except OSError:
        quiet_stderr()


@contextmanager
def stdout_written(done: str = "") -> Iterator[None]:
    """Output written to stdout inside (a local command's tables and JSON: ``danlu sim``,
    ``danlu estimate``), whose failure ends the command as the other commands' does, not
    with a traceback: its reader gone (``danlu sim run | head -1``) exits with
    :data:`PIPE_CLOSED`; another :class:`OSError` (``> /dev/full``, a full disk) prints
    ``error: cannot write the output: ...`` on stderr and exits with code 2. Wrap only
    writes: every OSError raised inside is taken for one.

    ``done``: what the command did all the same, added to that error (plain text a terminal
    may print): the output of a request that made something (``job 3f2a... was submitted all
    the same``), whose exit 2 alone read as a refusal, and a script sent it again."""
    try:
        yield
    except BrokenPipeError:
        quiet_stdout()
        raise typer.Exit(code=PIPE_CLOSED) from None
    except OSError as exc:
        quiet_stdout()
        told = f"; {done}" if done else ""
        with stderr_written():
            typer.echo(f"error: cannot write the output: {exc.strerror or exc}{told}", err=True)
        raise typer.Exit(code=2) from None
