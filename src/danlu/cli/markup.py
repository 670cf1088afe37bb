"""Text from the server or a trace file, made safe to print as Rich markup, and the
consoles the CLI prints it on."""

from __future__ import annotations

import errno
import os

from rich.console import Console
from rich.markup import escape

from danlu.core.values import visible


def as_text(value: object) -> str:
    """``value`` as Rich markup that shows it as it is: a name, id, reason, URL or error is
    text (``[/x]`` would make Rich fail, ``[bold]`` would vanish), and its control
    characters are written as escapes (``\\x1b``, ``\\n``), so a stored value or an
    endpoint's reply quoted in one can neither act on the terminal nor split a table's row."""
    return escape(visible(str(value)))


def visible_lines(value: object) -> str:
    """``value`` as plain text a terminal may print, its line breaks kept: each line's
    control characters written as escapes (:func:`~danlu.core.values.visible`: an ESC
    sequence or a carriage return of a traced program's output never reaches the terminal)
    and the lines joined by line breaks (``\\r\\n`` is one), trailing empty lines left out.
    For an error whose text spans lines (a failed trace's last output lines), which
    :func:`as_text` would run together with literal ``\\n``."""
    lines = str(value).replace("\r\n", "\n").rstrip("\n").split("\n")
    return "\n".join(visible(line) for line in lines)


class CliConsole(Console):
    """A Rich console whose reader going away raises :class:`BrokenPipeError` where it is
    written, as a plain write does. Rich's own answer exited with status 1 at once, past the
    command's handling: ``danlu sim plan ... | head -1`` then said that a target was
    missed, and the 141 of ``danlu sim`` and ``danlu estimate`` for a reader gone
    (:func:`~danlu.cli.output.stdout_written`) was never reached. A command without such
    handling still exits 1, as click answers the error."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # what is left to print is dropped
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def console(stderr: bool = False) -> Console:
    """A console for the CLI's output (``stderr``: its errors and notes) that prints text
    as it is: without Rich's emoji codes, which turned ``a:b:c`` into ``a🅱c`` and
    ``step:100:`` into ``step💯`` (in a job's command, a file's header quoted in an
    error, a name), which :func:`as_text` cannot escape; a reader gone raises
    :class:`BrokenPipeError` (:class:`CliConsole`)."""
    return CliConsole(stderr=stderr, emoji=False)
