"""The ``danlu`` command line. Each command group lives in its own module and registers itself
here; this module only assembles them."""

from __future__ import annotations

from danlu.cli.interrupt import interrupt_exits_quietly

# Ctrl-C while the commands are imported (about a second) exits 130 without a traceback,
# through the console script (which imports this module first) as through python -m danlu
with interrupt_exits_quietly():
    import sys
    from typing import Any

    import typer
    from typer.core import TyperGroup

    from danlu.cli import admin as admin_cli
    from danlu.cli import estimate as estimate_cli
    from danlu.cli import events as events_cli
    from danlu.cli import jobs as jobs_cli
    from danlu.cli import metrics as metrics_cli
    from danlu.cli import nodes as nodes_cli
    from danlu.cli import run as run_cli
    from danlu.cli import server as server_cli
    from danlu.cli import sim as sim_cli
    from danlu.cli import sweep as sweep_cli
    from danlu.cli import webhook as webhook_cli
    from danlu.cli.markup import OutputUnwritable
    from danlu.cli.options import fail
    from danlu.cli.output import (
        PIPE_CLOSED,
        buffered_stdout,
        quiet_stderr,
        quiet_stdout,
        stdout_written,
    )


class HelpContext(typer.Context):
    """The context of each ``danlu`` command: a help that cannot be written (``danlu
    --help > /dev/full``, ``danlu`` alone, ``danlu ls --help`` into a full disk) ends as a
    command's output does (:func:`~danlu.cli.output.stdout_written`: ``error: cannot write
    the output: ...``, exit 2), not with a traceback from rich's help printer, which writes
    the help while it is made."""

    def get_help(self) -> str:
        with stdout_written():
            return super().get_help()


def _help_written_safely(command: Any) -> None:
    """Give ``command`` and every command under it :class:`HelpContext`."""
    command.context_class = HelpContext
    for sub in getattr(command, "commands", {}).values():
        _help_written_safely(sub)


class DanluGroup(TyperGroup):
    """The ``danlu`` command group: every command's output that cannot be written ends it
    as ``danlu logs``, ``danlu sim`` and ``danlu estimate`` already ended: the reader gone
    (``danlu ls | head -1``, ``danlu wait A B | head -1``) exits with :data:`PIPE_CLOSED`
    (141), not click's 1 (which ``danlu wait`` documents as a job that did not succeed); a
    table into a full disk (``danlu show JOB > /dev/full``) is ``error: cannot write the
    output: ...``, exit 2, not a traceback. Commands that answer these themselves
    (``danlu run`` cancels its job first) are left to do so. The help of every command is
    written so too (:class:`HelpContext`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _help_written_safely(self)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            quiet_stdout()  # the exit's flush of what is left finds no reader either
            raise typer.Exit(code=PIPE_CLOSED) from None
        except OutputUnwritable as exc:
            quiet_stdout()
            raise fail(exc) from None

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Typer's own error messages (a usage error: ``danlu ls --limit 0``, ``danlu
        nosuch``; ``Aborted!``) that cannot be written (``2>/dev/full``) end the command
        with that error's exit code (2 for a usage error), not with a traceback from the
        failed write and exit 1. A help whose reader has gone (``danlu sim run --help |
        head -3``), which rich ends with exit 1, exits with :data:`PIPE_CLOSED` (141) as
        every other output does. Stdout is given a buffer where it has none
        (:func:`~danlu.cli.output.buffered_stdout`), lest output be lost unsaid."""
        buffered_stdout()
        try:
            return super().main(*args, **kwargs)
        except SystemExit as exc:
            if exc.code == 1 and isinstance(exc.__context__, BrokenPipeError):
                sys.exit(PIPE_CLOSED)  # rich's Console.on_broken_pipe (stdout already quiet)
            raise
        except OSError as exc:
            reported = exc.__context__  # the error whose message was being written
            if isinstance(reported, typer.Abort):
                code = 1
            elif isinstance(getattr(reported, "exit_code", None), int) and hasattr(
                reported, "format_message"
            ):  # a click exception: typer's own (vendored) or click's
                code = reported.exit_code  # type: ignore[union-attr]
            else:
                raise
            quiet_stderr()
            sys.exit(code)


class DanluTyper(typer.Typer):
    """The ``danlu`` app: a Ctrl-C while typer builds the command tree from it (before any
    command runs) exits 130 without a traceback, as one while it is imported does."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with interrupt_exits_quietly():
            return super().__call__(*args, **kwargs)


app = DanluTyper(
    cls=DanluGroup,
    rich_markup_mode="markdown",  # help text flows: a docstring's line breaks are not kept
    name="danlu",
    help="danlu: GPU-cluster resource manager and training controller for deep learning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

server_cli.register(app)
jobs_cli.register(app)
run_cli.register(app)
metrics_cli.register(app)
events_cli.register(app)
nodes_cli.register(app)
admin_cli.register(app)
sweep_cli.register(app)
webhook_cli.register(app)
sim_cli.register(app)
estimate_cli.register(app)


def main() -> None:  # pragma: no cover - console entry point
    app()
