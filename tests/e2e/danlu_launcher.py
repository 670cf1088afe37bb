"""Run the ``danlu`` CLI in a subprocess, with the job and server commands registered even
where ``danlu.cli.main`` lacks them (then this is just ``danlu``)."""

from __future__ import annotations

import typer

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app


def _names(typer_app: typer.Typer) -> set[str]:
    return {
        info.name or (info.callback.__name__.replace("_", "-") if info.callback else "")
        for info in typer_app.registered_commands
    }


def build() -> typer.Typer:
    """``danlu.cli.main.app`` plus whatever of ``up`` / ``submit`` it still lacks."""
    names = _names(app)
    if "up" not in names:
        from danlu.cli import server as server_cli

        server_cli.register(app)
    if "submit" not in names:
        jobs_cli.register(app)
    return app


if __name__ == "__main__":
    build()()
