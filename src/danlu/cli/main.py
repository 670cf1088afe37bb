"""The ``danlu`` command line. Each command group lives in its own module and registers itself
here; this module only assembles them."""

from __future__ import annotations

import typer

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

app = typer.Typer(
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
