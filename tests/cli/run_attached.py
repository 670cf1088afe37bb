"""``danlu run -- sleep 60`` against the in-memory API of ``cli_fake_api``, in a process of its
own, for the tests of what a signal or a closed pipe does to it (``test_cli_run_signals``).

Usage: ``python run_attached.py STATE_FILE``. The job stays RUNNING and writes a line to its
log every time it is read; on the way out the job's state is written to ``STATE_FILE``."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import typer
from cli_fake_api import TOKEN, FakeApi

from danlu.cli import jobs as jobs_cli
from danlu.cli import run as run_cli
from danlu.client import Client


def main(state_file: Path) -> None:
    """Run the command; write the job's state to ``state_file`` however it ends."""
    api = FakeApi()
    api.submitted_progress = ["RUNNING"]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs"):
            for job_id in api.logs:
                api.logs[job_id] += b"a line of output\n"
        return api.handler(request)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(handler))

    jobs_cli.client_factory = factory
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    run_cli.register(app)
    app.command("noop", hidden=True)(lambda: None)  # keeps ``run`` a subcommand
    try:
        app(["run", "--", "sleep", "60"])
    finally:
        state_file.write_text(" ".join(str(j["state"]) for j in api.jobs.values()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
