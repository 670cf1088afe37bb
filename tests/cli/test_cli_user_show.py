"""``danlu user show NAME``: the user's record and what happened to the account, each by
whom, through Typer's CliRunner against the real API app in this process on a SQLite store;
the user may show herself, not another."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from cli_real_api import real_api
from typer.testing import CliRunner

from danlu.cli import admin as admin_cli
from danlu.cli import jobs as jobs_cli

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
jobs_cli.register(APP)
admin_cli.register(APP)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with real_api(tmp_path, monkeypatch) as admin_token:
        yield admin_token


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_a_user_is_shown_with_her_history(server: str) -> None:
    for step in (("add", "alice"), ("add", "bob"), ("set", "alice", "--quota-gpus", "8")):
        assert run("user", *step)[0] == 0
    token = run("user", "token", "alice", "--label", "laptop")[1].strip()
    assert run("user", "disable", "alice", "--reason", "left the team")[0] == 0
    code, out, err = run("user", "show", "alice")
    assert code == 0, err
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "user alice" in lines and "GPU quota 8 GPUs" in lines, out
    assert any(line.startswith("state disabled since") for line in lines), out
    rows = [line.split("│")[2:5] for line in out.splitlines() if line.startswith("│ 2")]
    assert [[cell.strip() for cell in row] for row in rows] == [
        ["created", "admin", "role user"],
        ["changed", "admin", "quota_gpus none -> 8"],
        ["token_issued", "admin", f"token {token.split('_')[1]} (laptop)"],
        ["disabled", "admin", "left the team"],
    ], out
    code, out, _ = run("user", "show", "alice", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["name"] == "alice" and shown["disable_reason"] == "left the team"
    assert [e["kind"] for e in shown["events"]][-1] == "disabled"
    assert token not in out
    bob = run("user", "token", "bob")[1].strip()
    code, out, _ = run("user", "show", "bob", "--token", bob)
    assert code == 0 and out.split()[:2] == ["user", "bob"], out
    code, _, err = run("user", "show", "alice", "--token", bob)
    assert code == 2 and "only 'alice' or an admin" in err, err
    code, _, err = run("user", "show", "nobody")
    assert code == 2 and "user 'nobody' not found" in err, err
