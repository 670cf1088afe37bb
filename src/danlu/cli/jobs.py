"""The job and cluster commands over the REST client: ``danlu submit / wait / ls / show /
logs / cancel / rerun / update / hold / release / why / usage / top``, registered here
(:func:`register`), and what they share: the client, the consoles, the error and JSON
output.

Every command takes ``--home DIR`` (else ``DANLU_HOME``, else ``~/.danlu``) to find the server
started by ``danlu up`` and its admin token; ``--url`` / ``--token`` (or ``DANLU_URL`` /
``DANLU_TOKEN``) override. Errors print one line and exit with code 2.

The commands live by what they do: ``submit`` and ``rerun`` in :mod:`danlu.cli.job_submit`
(the flags that override a spec's fields: :mod:`danlu.cli.override_flags`), ``cancel``,
``update``, ``hold`` and ``release`` in :mod:`danlu.cli.job_changes`, the views ``ls``,
``show``, ``logs``, ``why`` and ``top`` in :mod:`danlu.cli.job_views`, ``wait`` in
:mod:`danlu.cli.waiting`, ``usage`` in :mod:`danlu.cli.usage`; they print through
:data:`console` and connect through :func:`connect` by this module's names, which tests
replace.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import typer

from danlu.cli import job_changes, job_submit, job_views, waiting
from danlu.cli import usage as usage_cli
from danlu.cli.markup import OutputUnwritable
from danlu.cli.markup import console as cli_console
from danlu.cli.options import error_line, refuse_empty
from danlu.cli.options import (
    fail as fail,  # re-exported: the commands' modules call common.fail
)
from danlu.cli.output import quiet_stdout
from danlu.cli.sweep_hint import sweep_hint
from danlu.client import Client
from danlu.client.errors import NoServerError, NotFoundError
from danlu.config import load_client_settings
from danlu.core.errors import DanluError

console = cli_console()
err = cli_console(stderr=True)

ClientFactory = Callable[[Path | None, str | None, str | None], Client]


def default_client(home: Path | None, url: str | None, token: str | None) -> Client:
    """A client from the flags, then ``DANLU_*`` (via danlu.config), then the home's files.
    A token given without a URL, and no server in the home to take the URL from (a user of
    a shared control plane, given only a token), is told to give the URL: it was told to
    start a server with ``danlu up``."""
    settings = load_client_settings(home, url, token)
    try:
        return Client.from_home(settings.home, url=settings.url, token=settings.token)
    except NoServerError as exc:
        if settings.token is None or settings.url is not None:
            raise
        raise NoServerError(
            "no server URL for the API token given (--token, DANLU_TOKEN): set DANLU_URL, or "
            "pass --url, to the control plane's address, e.g. http://HOST:8470 (and no local "
            f"server: {exc})"
        ) from None


client_factory: ClientFactory = default_client
"""How commands build their client; tests replace it (e.g. with an ASGI transport)."""


def connect(home: Path | None, url: str | None, token: str | None) -> Client:
    """The client for one command; a :class:`DanluError` exits with code 2. An empty
    ``--url`` or ``--token`` is refused: it was read as not given, so ``--token "$TOKEN"``
    with the variable unset went on with the home's admin token (``--home``:
    :data:`~danlu.cli.options.HomeOpt`)."""
    try:
        refuse_empty("--url", url, "give the server's URL, or leave --url out for the home's")
        refuse_empty("--token", token, "give an API token, or leave --token out for the home's")
        return client_factory(home, url, token)
    except DanluError as exc:
        raise fail(exc) from None


T = TypeVar("T")


def ask(home: Path | None, url: str | None, token: str | None, request: Callable[[Client], T]) -> T:
    """``request`` made with the command's client; a :class:`DanluError` exits with code 2."""
    with connect(home, url, token) as client:
        try:
            return request(client)
        except DanluError as exc:
            raise fail(exc) from None


def ask_job(
    home: Path | None,
    url: str | None,
    token: str | None,
    job: str,
    request: Callable[[Client], T],
    sweep_action: str = "show",
) -> T:
    """:func:`ask` for a request about the job ``job``: a "job not found" that is a sweep's
    or job array's id names the ``danlu sweep`` command (``sweep_action``) that takes it
    (:func:`~danlu.cli.sweep_hint.sweep_hint`)."""
    with connect(home, url, token) as client:
        try:
            return request(client)
        except NotFoundError as exc:
            raise fail(f"{exc}{sweep_hint(client, job, sweep_action)}") from None
        except DanluError as exc:
            raise fail(exc) from None


SHOWN_PROBLEMS = 10
"""The most of a reply's wrong fields :func:`fail_on` prints (then a count of the others)."""


def fail_on(problems: Sequence[str]) -> None:
    """When the server sent fields of the wrong type (``problems``, from
    :mod:`danlu.cli.reply_fields`; what was shown left them out): print them on stderr and
    exit with code 2."""
    if problems:
        report(problems)
        raise typer.Exit(code=2)


def report(problems: Sequence[str]) -> None:
    """Print the first :data:`SHOWN_PROBLEMS` of ``problems`` on stderr, as errors."""
    for problem in problems[:SHOWN_PROBLEMS]:
        error_line(problem)
    if len(problems) > SHOWN_PROBLEMS:
        error_line(f"and {len(problems) - SHOWN_PROBLEMS} more")


def print_json(value: Any) -> None:
    """JSON on stdout, unstyled (for scripts): :func:`print_plain`."""
    print_plain(json.dumps(value, indent=2, sort_keys=False))


def print_plain(text: str) -> None:
    """``text`` and a line break on stdout, unstyled (for scripts); output that cannot be
    written (a full disk) is an :class:`OutputUnwritable`, which ends the command with an
    error line and exit 2 (:class:`~danlu.cli.main.DanluGroup`, or the command's own
    handling: :func:`~danlu.cli.output.stdout_written`), not a traceback."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader has gone: exit 141 (cli.main.DanluGroup)
        raise
    except OSError as exc:
        quiet_stdout()
        raise OutputUnwritable(exc.errno, exc.strerror or str(exc)) from None


def register(app: typer.Typer) -> None:
    """Add ``submit``, ``wait``, ``ls``, ``show``, ``logs``, ``cancel``, ``rerun``,
    ``update``, ``hold``, ``release``, ``why``, ``usage`` and ``top``, in that order (the
    node commands are :mod:`danlu.cli.nodes`')."""
    commands = (
        job_submit.submit,
        waiting.wait,
        job_views.ls,
        job_views.show,
        job_views.logs,
        job_changes.cancel,
        job_submit.rerun,
        job_changes.update,
        job_changes.hold,
        job_changes.release,
        job_views.why,
        usage_cli.usage,
        job_views.top,
    )
    for command in commands:
        app.command(name=command.__name__)(command)
