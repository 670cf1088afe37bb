"""The options every command that talks to a server takes, the job argument, and which
options a command was given."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", help="danlu home of the server (default: DANLU_HOME or ~/.danlu)."),
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
