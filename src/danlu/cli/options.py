"""The options every command that talks to a server takes, the job argument, which options
a command was given, and the refusal of an empty value (a script's unset variable)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import Field, TypeAdapter, ValidationError
from rich.markup import escape

from danlu.cli.markup import as_text, visible_lines
from danlu.cli.markup import console as cli_console
from danlu.cli.output import stderr_written
from danlu.client.errors import ApiError
from danlu.core.errors import SpecError
from danlu.core.spec import read_spec_text, spec_file_data
from danlu.core.state import JobState
from danlu.core.values import plain_number_text


def error_line(exc: Exception | str, source: object = None) -> None:
    """Print ``error: ...`` on stderr, one line (its text shown as it is, never as Rich
    markup or terminal control), for an error after which the command goes on or exits
    otherwise than :func:`fail` does (``danlu wait``'s timeout, 124); ``source``: what it
    is about, before it (a spec file's path: ``error: job.yaml: ...``). A spec error of
    this side (not the server's) keeps its line breaks: the YAML reader's words and the
    line with the fix that follows them (a tab in the file) read as lines, not with a
    literal ``\\n`` (each line's control characters are still escapes)."""
    text = escape(visible_lines(exc)) if own_spec_error(exc) else as_text(exc)
    about = "" if source is None else f"{as_text(source)}: "
    line = f"[red]error:[/red] {about}{text}"
    with stderr_written():  # 2>/dev/full: the exit code is all that is left to say
        cli_console(stderr=True).print(line, highlight=False, soft_wrap=True)


def own_spec_error(exc: Exception | str) -> bool:
    """Whether ``exc`` is a :class:`SpecError` raised here, in the words of danlu's own
    spec reading, rather than an error the server sent (whose text is shown on one line)."""
    return isinstance(exc, SpecError) and not isinstance(exc, ApiError)


def fail(exc: Exception | str, source: object = None) -> typer.Exit:
    """Print ``error: ...`` on stderr (:func:`error_line`, ``source`` before it) and return
    the exit-2 exception to raise."""
    error_line(exc, source)
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


def load_spec_file(path: Path, fix: str, kind: str = "job spec") -> Any:
    """The data of the spec file argument ``SPEC`` (``danlu submit``, ``danlu sweep
    submit``; ``kind``: ``job spec`` or ``sweep spec``), read by
    :func:`~danlu.core.spec.read_spec_text`, which refuses a named pipe (``mkfifo``: reading
    one waits for a writer, with no writer for ever; ``fix``: what to give instead). A pipe
    this process was handed open (``/dev/stdin``, the ``/dev/fd/63`` of ``danlu submit <(envsubst
    < job.yaml)``) is a link to it, not the pipe by name: still read. A file that cannot be
    read is one error line that names it once (the caller puts the file before errors of
    its text) and exit 2. Errors of its text are raised as the YAML reader raises them."""
    try:
        text = read_spec_text(path, "SPEC", fix, kind)
    except SpecError as exc:
        raise fail(exc) from None
    return spec_file_data(text, path)


def _plain_number(
    flag: str,
    adapter: TypeAdapter[Any],
    example: str,
    whole: bool,
    low: float | None,
    high: float | None,
) -> Callable[[Any], Any]:
    """The parser of a number flag (:func:`int_option`, :func:`float_option`): a value not
    written plainly, not a number (a ``whole`` one for an int flag) or out of the bounds
    ``low`` .. ``high`` (read by ``adapter``) is one error line naming the flag, what it
    takes and an ``example``, and exit 2 (click's usage text and boxed ``Invalid value``
    were several). Typer passes the default through the parser too, as a number: kept as
    it is."""
    kind = "a whole number" if whole else "a number"

    def parse(value: Any) -> Any:
        if isinstance(value, str) and not plain_number_text(value):
            raise fail(
                SpecError(
                    flag,
                    f"{value!r} is not a number written plainly; write it in ASCII digits "
                    f"without '_', e.g. {flag} {example}",
                )
            )
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            kinds = {str(error["type"]) for error in exc.errors()}
            bounds = _range_text(low, high)
            if kinds & {"greater_than_equal", "less_than_equal"}:
                shown = value if isinstance(value, str) else repr(value)
                why = f"{shown} is out of range; give {kind} {bounds}"
            else:
                why = f"{value!r} is not {kind}; give one" + (f" {bounds}" if bounds else "")
            raise fail(SpecError(flag, f"{why}, e.g. {flag} {example}")) from None

    return parse


def _range_text(low: float | None, high: float | None) -> str:
    """The bounds of a number flag in words: ``from 1 to 1000``, ``of 0.1 or more``."""

    def number(bound: float) -> str:
        return f"{bound:g}" if isinstance(bound, float) else str(bound)

    if low is not None and high is not None:
        return f"from {number(low)} to {number(high)}"
    if low is not None:
        return f"of {number(low)} or more"
    return f"of {number(high)} or less" if high is not None else ""


def _number_option(
    kind: type[int] | type[float],
    decls: tuple[str, ...],
    help: str | None,
    example: str,
    low: float | None,
    high: float | None,
    extra: dict[str, Any],
) -> Any:
    """The ``typer.Option`` :func:`int_option` and :func:`float_option` build: ``low`` and
    ``high`` both shown in the help (typer's ``min``/``max``) and checked by the parser,
    from this one statement of them."""
    if not decls or not decls[0].startswith("--"):
        raise ValueError(f"a number option's first name is its long flag (--name), not {decls}")
    flag = decls[0]
    adapter: TypeAdapter[Any] = TypeAdapter(Annotated[kind, Field(ge=low, le=high)])
    return typer.Option(
        *decls,
        min=low,
        max=high,
        help=help,
        parser=_plain_number(flag, adapter, example, kind is int, low, high),
        **extra,
    )


def int_option(
    *decls: str,
    help: str | None,
    example: str,
    low: int | None = None,
    high: int | None = None,
    **extra: Any,
) -> Any:
    """A ``typer.Option`` for a whole-number flag, its names ``decls`` (the long flag first:
    ``"--tail", "-n"``), at least ``low`` and at most ``high`` where given: shown in the help
    and checked as it is read, an error naming the flag. Typer's own reading took ``1_000``
    as 1000 (``--limit 1_0`` was 10): a number is written in ASCII digits without ``_``, as
    ``--port`` and ``--quota-gpus`` want it; ``example`` is a valid value to show in that
    error. ``extra``: further ``typer.Option`` arguments."""
    return _number_option(int, decls, help, example, low, high, extra)


def float_option(
    *decls: str,
    help: str | None,
    example: str,
    low: float | None = None,
    high: float | None = None,
    **extra: Any,
) -> Any:
    """:func:`int_option` for a flag that takes any number (``--poll 1_0`` was 10 s)."""
    return _number_option(float, decls, help, example, low, high, extra)


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
