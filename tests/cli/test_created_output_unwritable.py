"""``danlu project add`` and ``danlu user add`` whose output cannot be written (``>
/dev/full``) say, in their error line, that the project or user was created: they said
``error: cannot write the output: ...`` alone, exit 2, as a refused request does, and run
again they failed with ``already exists``, so a script could not tell it had been made.
Against the real API app on a SQLite store, which is asked afterwards whether it was."""

from __future__ import annotations

import errno
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_fake_api import invoke
from cli_real_api import real_api

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.cli.markup import console as cli_console
from danlu.client import Client


class FullDisk(io.StringIO):
    """A stdout whose writes fail as a full disk's do."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def full_disk_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The real API app, printed to by the CLI's console; the first command's stdout is a
    full disk, the next ones' the test runner's."""
    with real_api(tmp_path, monkeypatch):
        real_factory = jobs_cli.client_factory
        kept: list[object] = []  # the runner's stdout, kept: dropped, it would be closed

        def factory(home: Path | None, url: str | None, token: str | None) -> Client:
            if not kept:
                kept.append(sys.stdout)
                sys.stdout = FullDisk()  # set inside the test runner's (which puts its own back)
            return real_factory(home, url, token)

        monkeypatch.setattr(jobs_cli, "client_factory", factory)
        # the CLI's own console: its failed write is an error line (a plain Rich one's, a
        # traceback)
        monkeypatch.setattr(jobs_cli, "console", cli_console())
        yield


@pytest.mark.parametrize(
    ("args", "told", "listed"),
    [
        (
            ["project", "add", "p3", "--share", "2"],
            "project p3 was created all the same (danlu project ls)",
            ["project", "ls", "--json"],
        ),
        (
            ["user", "add", "bob", "--json"],
            "user bob was created all the same (danlu user show bob)",
            ["user", "ls", "--json"],
        ),
    ],
    ids=["project-add", "user-add"],
)
@pytest.mark.usefixtures("full_disk_once")
def test_the_error_line_says_what_was_created(
    args: list[str], told: str, listed: list[str]
) -> None:
    code, _, err = invoke(app, *args)
    assert code == 2, err
    assert " ".join(err.split()) == (
        f"error: cannot write the output: No space left on device; {told}"
    )
    code, out, err = invoke(app, *listed)  # stdout written again: it was made, as told
    assert code == 0, err
    assert args[2] in [row["name"] for row in json.loads(out)]
