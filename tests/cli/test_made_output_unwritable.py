"""A command that made something (``danlu submit``, ``rerun``, ``sweep submit``, ``webhook
add``, ``user token``) whose output cannot be written (``> /dev/full``) says, in its error
line, what it made: it said ``error: cannot write the output: ...`` alone, exit 2, as a
refused request does, so a script sent the submission again (a second job), and the token or
webhook secret shown once was left live without a word of it."""

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
from danlu.cli.markup import console as cli_console
from danlu.client import Client


class FullDisk(io.StringIO):
    """A stdout whose writes fail as a full disk's do."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


JOB = {"id": "0a1b2c3d4e5f", "name": "a", "state": "PENDING"}
REPLIES = {
    ("POST", "/api/v1/jobs"): JOB,
    ("POST", "/api/v1/jobs/0a1b2c3d4e5f/rerun"): JOB,
    ("POST", "/api/v1/sweeps"): {"id": "5e5e5e5e", "name": "lr", "state": "RUNNING"},
    ("POST", "/api/v1/webhooks"): {
        "id": "wh01",
        "url": "https://hooks.example/x",
        "states": ["FAILED"],
        "secret": "s3cret",
    },
    ("POST", "/api/v1/users/bob/tokens"): {"token": "dl_ab12_x-Y_z"},
}


def _answer(request: httpx.Request) -> httpx.Response:
    reply = REPLIES.get((request.method, request.url.path))
    if reply is None:
        return httpx.Response(404, json={"error": {"type": "NotFoundError", "message": "no"}})
    return httpx.Response(200, json=reply)


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands' client answers as :data:`REPLIES`; their stdout is a full disk."""
    kept: list[object] = []  # the runner's stdout, kept: dropped, it would be closed

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        kept.append(sys.stdout)
        sys.stdout = FullDisk()  # set inside the test runner's (which puts its own back)
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(_answer))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    # a console of its own: one whose write failed prints nothing more (Rich's quiet)
    monkeypatch.setattr(jobs_cli, "console", cli_console())


@pytest.mark.parametrize(
    ("args", "told"),
    [
        (
            ["submit", "{spec}"],
            "job 0a1b2c3d4e5f was submitted all the same (danlu show 0a1b2c3d4e5f)",
        ),
        (
            ["submit", "{spec}", "--json"],
            "job 0a1b2c3d4e5f was submitted all the same (danlu show 0a1b2c3d4e5f)",
        ),
        (
            ["rerun", "0a1b2c3d4e5f"],
            "job 0a1b2c3d4e5f was submitted all the same (danlu show 0a1b2c3d4e5f)",
        ),
        (
            ["sweep", "submit", "{sweep}"],
            "sweep 5e5e5e5e was submitted all the same (danlu sweep show 5e5e5e5e)",
        ),
        (
            ["webhook", "add", "https://hooks.example/x", "--json"],
            "webhook wh01 was added all the same, its secret not shown: remove it (danlu "
            "webhook rm wh01) and add it again",
        ),
        (
            ["user", "token", "bob"],
            "a token for bob was issued all the same, and not shown: revoke it (danlu user "
            "revoke bob ab12)",
        ),
    ],
    ids=["submit", "submit-json", "rerun", "sweep-submit", "webhook-add", "user-token"],
)
@pytest.mark.usefixtures("full_disk")
def test_the_error_line_says_what_was_made(tmp_path: Path, args: list[str], told: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: a\ncommand: [echo]\n")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "name: lr\ntrial:\n  command: [echo]\nparameters:\n  lr: {values: [0.1, 0.01]}\n"
        "metric: {name: loss, goal: minimize}\ntrials: 2\n"
    )
    code, _, err = invoke(app, *(a.format(spec=spec, sweep=sweep) for a in args))
    assert code == 2, err
    assert " ".join(err.split()) == (
        f"error: cannot write the output: No space left on device; {told}"
    )
