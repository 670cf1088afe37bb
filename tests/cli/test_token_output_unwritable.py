"""``danlu user token NAME > /dev/full``: the token, written with no check, was a traceback
(an OSError out of the write) and exit 1; now it ends as every command's unwritable output
does, ``error: cannot write the output: ...`` and exit 2, saying which token to revoke (the
token, shown once, is lost either way)."""

from __future__ import annotations

import errno
import io
import sys
from pathlib import Path

import httpx
import pytest
from cli_fake_api import TOKEN, invoke

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.client import Client


class FullDisk(io.StringIO):
    """A stdout whose writes fail as a full disk's do."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def _issue(request: httpx.Request) -> httpx.Response:
    if request.method == "POST" and request.url.path.endswith("/users/bob/tokens"):
        return httpx.Response(200, json={"token": "dl_ab12_x-Y_z"})
    return httpx.Response(404, json={"error": {"type": "NotFoundError", "message": "no route"}})


def test_a_token_into_a_full_disk_is_an_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    runners: list[object] = []  # the runner's stdout, kept: dropped, it would be closed

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        # the command's stdout, set inside the test runner's (which puts its own back after)
        runners.append(sys.stdout)
        sys.stdout = FullDisk()
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(_issue))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    code, _, err = invoke(app, "user", "token", "bob")
    assert code == 2
    assert err == (
        "error: cannot write the output: No space left on device; a token for bob was issued "
        "all the same, and not shown: revoke it (danlu user revoke bob ab12)\n"
    )
