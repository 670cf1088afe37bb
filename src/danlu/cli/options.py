"""The options every command that talks to a server takes, and the job argument."""

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
