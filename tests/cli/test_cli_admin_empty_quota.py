"""``danlu project add/set`` and ``danlu user set`` refuse an empty ``--quota-gpus`` or
``--quota-memory`` (exit 2, naming the flag, nothing sent): it was read as ``none``, so
``--quota-gpus "$GPUS"`` with the variable unset removed the quota. ``none`` still does."""

from __future__ import annotations

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


@pytest.mark.parametrize("empty", ["", "  "])
@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["project", "set", "research"], "--quota-gpus"),
        (["project", "set", "research"], "--quota-memory"),
        (["project", "add", "research"], "--quota-gpus"),
        (["project", "add", "research"], "--quota-memory"),
        (["user", "set", "alice"], "--quota-gpus"),
    ],
)
def test_an_empty_quota_is_refused_and_nothing_is_sent(
    api: FakeApi, command: list[str], flag: str, empty: str
) -> None:
    result = CliRunner().invoke(_app(), [*command, flag, empty])
    assert result.exit_code == 2, result.output
    error = " ".join(result.stderr.split())
    assert error.startswith(f"error: {flag}: is empty"), error
    assert "'none' to remove the quota" in error
    assert api.requests == []  # the quota was not removed


def test_none_still_removes_a_quota(api: FakeApi) -> None:
    result = CliRunner().invoke(_app(), ["project", "set", "research", "--quota-gpus", "none"])
    assert api.requests, result.output  # sent (the fake may not know the route)
    body = api.requests[-1].content.decode()
    assert '"quota_gpus": null' in body or '"quota_gpus":null' in body, body
