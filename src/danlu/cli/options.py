"""The options every command that talks to a server takes, the job argument, which options
a command was given, and the refusal of an empty value (a script's unset variable)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from danlu.cli.markup import as_text
from danlu.cli.markup import console as cli_console
from danlu.core.errors import SpecError
from danlu.core.state import JobState


def error_line(exc: Exception | str) -> None:
    """Print ``error: ...`` on stderr, one line (its text shown as it is, never as Rich
    markup or terminal control), for an error after which the command goes on or exits
    otherwise than :func:`fail` does (``danlu wait``'s timeout, 124)."""
    line = f"[red]error:[/red] {as_text(exc)}"
    cli_console(stderr=True).print(line, highlight=False, soft_wrap=True)


def fail(exc: Exception | str) -> typer.Exit:
    """Print ``error: ...`` on stderr (:func:`error_line`) and return the exit-2 exception
    to raise."""
    error_line(exc)
    return typer.Exit(code=2)


def empty_error(name: str, fix: str) -> SpecError:
    """The error for an empty value of the flag or argument ``name``: ``--name: empty; give
    a job name, or leave --name out for the program's`` (``fix``: what to give instead)."""
    return SpecError(name, f"empty; {fix}")


def refuse_empty(name: str, value: str | None, fix: str) -> None:
    """A :func:`empty_error` when ``value`` (of the flag ``name``) was given (not None) but
    is empty or blank: an unset shell variable (``--project "$P"``) that would otherwise be
    read as not given, as the default, or as no filter, without a word."""
    if value is not None and not value.strip():
        raise empty_error(name, fix)


def path_of(name: str, fix: str) -> Callable[[str], Path]:
    """A typer ``parser`` for the path flag or argument ``name``: the path as given; an
    empty one is an error line (:func:`empty_error`) and exit 2. Once converted, ``""`` is
    ``Path(".")``, the current directory (``--home "$DIR"`` with DIR unset made the current
    directory the home), and ``.`` cannot be told from it: so the text is checked. A blank
    one (``" "``) is a name like any other, never the current directory: it is taken."""

    def parse(text: str) -> Path:
        if text == "":
            raise fail(empty_error(name, fix))
        return Path(text)

    return parse


def job_states(given: list[str]) -> list[str]:
    """``--state`` values as job states: any case, repeated or comma-separated
    (``failed,cancelled``, as ``danlu ls`` and ``danlu events`` take them; the server read
    that as one unknown state, ``states.0``); one that is no job state, or empty, is a
    :class:`SpecError` naming ``--state``."""
    valid = [state.value for state in JobState]
    out: list[str] = []
    for value in given:
        for part in value.split(","):
            state = part.strip().upper()
            if state not in valid:
                raise SpecError(
                    "--state",
                    f"{part.strip()!r} is not a job state; use one of {', '.join(valid)} "
                    "(repeat --state, or write a,b, for several)",
                )
            out.append(state)
    return out


HomeOpt = Annotated[
    Path | None,
    typer.Option(
        "--home",
        help="danlu home of the server (default: DANLU_HOME or ~/.danlu).",
        parser=path_of(
            "--home",
            "give the server's home directory, or leave --home out for DANLU_HOME or ~/.danlu",
        ),
    ),
]
UrlOpt = Annotated[
    str | None, typer.Option("--url", help="Server URL (overrides the home; or DANLU_URL).")
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", help="API token (overrides the home; or DANLU_TOKEN).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
JobArg = Annotated[str, typer.Argument(help="Job id (or a unique prefix).")]


def given_options(ctx: typer.Context) -> frozenset[str]:
    """The command's options (by parameter name) that the user gave, even at their default's
    value (``--node-repair 1h``, ``--margin 5%``), not those left to their default. (Typer
    bundles a click of its own: its parameter sources are told apart by name.)"""
    defaults = {"DEFAULT", "DEFAULT_MAP"}
    return frozenset(
        name
        for name in ctx.params
        if (source := ctx.get_parameter_source(name)) is not None and source.name not in defaults
    )
