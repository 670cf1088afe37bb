"""Ctrl-C before a command runs: while the command line is imported (about a second) or
built. Light on purpose (the standard library only): it is imported before everything else
of the command line, so that it guards those imports."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

INTERRUPTED = 128 + signal.SIGINT
"""The exit status after Ctrl-C, as a shell gives 128 + SIGINT (130)."""


@contextmanager
def interrupt_exits_quietly() -> Iterator[None]:
    """A Ctrl-C (:class:`KeyboardInterrupt`) inside ends the process with
    :data:`INTERRUPTED` and no traceback, as a running command ends on Ctrl-C. Wrap only
    what no command has started in yet (imports, building the command tree): a command that
    must undo something first (``danlu run`` cancels its job) catches the interrupt
    itself."""
    try:
        yield
    except KeyboardInterrupt:
        raise SystemExit(INTERRUPTED) from None
