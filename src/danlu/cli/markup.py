"""Text from the server or a trace file, made safe to print as Rich markup, and the
consoles the CLI prints it on."""

from __future__ import annotations

import errno
import os
from typing import Any

from rich.console import Console
from rich.markup import escape

from danlu.cli.fitted_table import prints_whole
from danlu.core.errors import DanluError
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


def after_state(state: object, reason: object) -> str:
    """What follows a job's or sweep's ``state`` where a line prints the state and then its
    ``reason`` (plain text, for :func:`as_text`), with the state said once: ``: waiting for
    1 GPU(s)``; a reason that begins with the state's word goes on from the state itself
    (the server's ``why`` of an ended job is ``failed: out of memory ...``, a cancelled
    one's reason ``cancelled by alice``, a running one's ``running on n1:0``), so the line
    reads ``FAILED: out of memory ...``, ``CANCELLED by alice``, ``RUNNING on n1:0``, not
    ``FAILED: failed: ...``. Nothing for no reason."""
    text = str(reason) if reason is not None else ""
    word = state.lower() if isinstance(state, str) else ""  # no state: the reason as it is
    if not text:
        return ""
    if not word or text[: len(word)].lower() != word:
        return f": {text}"
    rest = text[len(word) :]
    if rest.startswith(":"):
        return f": {rest[1:].lstrip()}" if rest[1:].strip() else ""
    if not rest or rest[0] in " (;,":
        return rest
    return f": {text}"  # a longer word: "failedover" says no state


def reason_after_state(state: object, reason: object) -> str:
    """The ``reason`` of a change into ``state`` where it has a column of its own beside the
    state's (an events table): what :func:`after_state` writes after the state, without its
    ``: ``, so that the row says the state once: ``by alice`` beside CANCELLED (for
    ``cancelled by alice``), ``on n1:0`` beside RUNNING, ``out of memory`` beside FAILED
    (for ``failed: out of memory``), ``exit code 1; out of restarts (1 of 1)`` beside FAILED
    (for ``failed (exit code 1); out of restarts (1 of 1)``: the parenthesis that went on
    from the word opened, which began the cell with ``(``); a reason that does not begin
    with the state's word as it is. Plain text, for :func:`as_text`; empty for no reason."""
    said = after_state(state, reason)
    rest = said[2:] if said.startswith(": ") else said.lstrip()
    if rest.startswith("(") and not said.startswith(": "):
        closed = rest.find(")")
        if closed > 0 and "(" not in rest[1:closed]:  # "(exit code 1); ...": unwrapped
            return (rest[1:closed] + rest[closed + 1 :]).strip()
        return str(reason)  # the parenthesis left as the reason has it, with its word
    return rest


def note_lines(notes: object) -> list[str]:
    """A reply's ``notes`` (a sweep's: what its submission tells of every trial, as a
    new job's tells of it) as ``note: ...`` lines of markup, each note's text as
    :func:`as_text` shows it; none for no list, and an entry that is not text is left out."""
    if not isinstance(notes, list):
        return []
    return [f"note: {as_text(note)}" for note in notes if isinstance(note, str)]


NEXT_ROUND = "waiting for the next scheduling round"
"""A new job's pending reason when it waits for no other job: its submission's notes follow
it in parentheses (``waiting for the next scheduling round (memory estimate skipped (...):
using whole GPUs)``)."""


def submitted_notes(job: dict[str, Any]) -> tuple[str, list[str]]:
    """What a new job (the reply of ``POST /jobs`` or a rerun) waits for (a job it depends
    on; empty when it waits for no job) and the notes of its submission (how its
    ``gpu_memory: auto`` was resolved, the model family inferred): the reply's ``notes`` as
    they are, what it waits for being its ``pending_reason`` without them (the server adds
    them after it, joined with ``"; "``). A reply without a list of ``notes`` (a server
    older than the field) has both from its ``pending_reason`` (:func:`submission_notes`)."""
    notes = job.get("notes")
    if not isinstance(notes, list):
        return submission_notes(job)
    told = [note for note in notes if isinstance(note, str)]
    reason = job.get("pending_reason")
    if not job.get("waiting_on") or not isinstance(reason, str):
        return "", told
    added = "".join(f"; {note}" for note in told)
    return (reason[: -len(added)] if added and reason.endswith(added) else reason), told


def submission_notes(job: dict[str, Any]) -> tuple[str, list[str]]:
    """A new job's ``pending_reason`` parted into what it waits for (a job it depends on;
    empty when it waits for no job) and the notes its submission added there (how its
    ``gpu_memory: auto`` was resolved, the model family inferred), as ``POST /sweeps``
    gives them in its ``notes``: the server joins them with ``"; "`` after the job waited
    for, else in parentheses after :data:`NEXT_ROUND`. A ``"; "`` within a note's own
    parentheses (a failed trace's message) does not part it; a note with a parenthesis it
    does not close runs on into the next one. Only for a reply without ``notes`` (a server
    older than the field): :func:`submitted_notes` takes the reply's own."""
    reason = job.get("pending_reason")
    if not isinstance(reason, str):
        return "", []
    if job.get("waiting_on"):  # a job's id and name never hold "; "
        waits, _, told = reason.partition("; ")
        return waits, _parted(told)
    opening = f"{NEXT_ROUND} ("
    if reason.startswith(opening) and reason.endswith(")"):
        return "", _parted(reason[len(opening) : -1])
    return "", []


def _parted(told: str) -> list[str]:
    """``told`` split at each ``"; "`` outside parentheses; none for empty text."""
    notes: list[str] = []
    depth, start = 0, 0
    for at, char in enumerate(told):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == ";" and depth == 0 and told.startswith("; ", at):
            notes.append(told[start:at])
            start = at + 2
    notes.append(told[start:])
    return [note for note in notes if note.strip()]


class CliConsole(Console):
    """A Rich console whose reader going away raises :class:`BrokenPipeError` where it is
    written, as a plain write does. Rich's own answer exited with status 1 at once, past the
    command's handling: ``danlu sim plan ... | head -1`` then said that a target was
    missed, and the 141 of ``danlu sim`` and ``danlu estimate`` for a reader gone
    (:func:`~danlu.cli.output.stdout_written`) was never reached. A command without such
    handling exits 141 too (:class:`~danlu.cli.main.DanluGroup`), not click's 1.

    Into a pipe or a file (:func:`~danlu.cli.fitted_table.prints_whole`) a line is printed
    whole, never folded at the 80 columns Rich assumes there: ``danlu wait JOB | grep``
    and ``danlu why JOB > why.txt`` had a long reason split onto a second line."""

    def print(self, *objects: Any, **options: Any) -> None:
        """:meth:`rich.console.Console.print`, soft-wrapped by default into a pipe or a
        file (a table's cells still fold there: :func:`~danlu.cli.fitted_table.print_whole`
        prints it whole)."""
        if options.get("soft_wrap") is None and prints_whole(self):
            options["soft_wrap"] = True
        super().print(*objects, **options)

    def on_broken_pipe(self) -> None:
        self.quiet = True  # what is left to print is dropped
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    def _check_buffer(self) -> None:
        """Rich's write of what was printed; a write that fails otherwise than by the
        reader going (``> /dev/full``: a full disk, an I/O error) raises
        :class:`OutputUnwritable`, which the ``danlu`` command group answers with an error
        line and exit 2 (:class:`~danlu.cli.main.DanluGroup`): it was a traceback from any
        command that prints a table."""
        try:
            super()._check_buffer()
        except BrokenPipeError:
            raise
        except OSError as exc:
            self.quiet = True  # what is left to print is dropped
            raise OutputUnwritable(exc.errno, exc.strerror or str(exc)) from exc


class OutputUnwritable(DanluError, OSError):
    """The CLI's output could not be written (its console's write failed: a full disk);
    ``strerror`` says why. An :class:`OSError`, as the commands that handle their own
    output's errors (``danlu logs``, ``danlu sim``) expect of a failed write; a
    :class:`DanluError` that a command's own error handling prints as ``error: cannot write
    the output: ...`` too."""

    def __str__(self) -> str:
        return f"cannot write the output: {self.strerror or OSError.__str__(self)}"


def console(stderr: bool = False) -> Console:
    """A console for the CLI's output (``stderr``: its errors and notes) that prints text
    as it is: without Rich's emoji codes, which turned ``a:b:c`` into ``a🅱c`` and
    ``step:100:`` into ``step💯`` (in a job's command, a file's header quoted in an
    error, a name), which :func:`as_text` cannot escape; a reader gone raises
    :class:`BrokenPipeError` (:class:`CliConsole`)."""
    return CliConsole(stderr=stderr, emoji=False)
