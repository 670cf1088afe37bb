"""``danlu user set NAME --role admin|user`` sends the role (its other flags kept beside it);
a role that is none is refused naming ``--role`` and its choices, nothing sent."""

from __future__ import annotations

import json

import pytest
import typer
from cli_fake_api import FakeApi, serve_commands
from typer.testing import CliRunner

from danlu.cli import admin as admin_cli


def _app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    admin_cli.register(app)
    return app


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_commands(monkeypatch)


def test_role_is_sent_with_the_other_fields_and_a_bad_one_is_refused(api: FakeApi) -> None:
    runner = CliRunner()
    runner.invoke(_app(), ["user", "set", "bob", "--role", "Admin ", "--quota-gpus", "2"])
    assert api.requests, "nothing was sent"
    sent = api.requests[-1]
    assert (sent.method, sent.url.path) == ("PUT", "/api/v1/users/bob")
    assert json.loads(sent.content) == {"role": "admin", "quota_gpus": 2.0}
    before = len(api.requests)
    refused = runner.invoke(_app(), ["user", "set", "bob", "--role", "boss"])
    assert refused.exit_code == 2, refused.output
    error = " ".join(refused.stderr.split())
    assert error.startswith("error: --role: 'boss' is not a role: give admin or user"), error
    assert len(api.requests) == before
    nothing = runner.invoke(_app(), ["user", "set", "bob"])
    assert nothing.exit_code == 2 and "--role admin|user" in nothing.stderr
