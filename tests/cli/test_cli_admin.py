"""``danlu whoami``, ``danlu user add / token`` and ``danlu project ls / add / set`` through
Typer's CliRunner, against the real API app in this process (FastAPI's test transport) on a
SQLite store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from cli_real_api import real_api
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import admin as admin_cli
from danlu.cli import jobs as jobs_cli
from danlu.cli.titled_table import titled_table

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
jobs_cli.register(APP)
admin_cli.register(APP)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The API app on a fresh home; the commands reach it with the token they are given
    (``--token``), the admin's when none is. Yields the admin's token."""
    with real_api(tmp_path, monkeypatch) as admin_token:
        yield admin_token


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_an_admin_adds_a_user_who_then_works_with_its_token(server: str) -> None:
    assert run("whoami") == (0, "admin (admin)\n", "")
    code, out, _ = run("user", "add", "alice")
    assert code == 0 and "user alice (user)" in out
    code, token, _ = run("user", "token", "alice", "--label", "laptop")
    token = token.strip()
    assert code == 0 and token.startswith("dl_") and "\n" not in token
    code, out, _ = run("whoami", "--token", token, "--json")
    alice = {
        "name": "alice",
        "role": "user",
        "os_user": None,
        "quota_gpus": None,
        "disabled_at": None,
        "disabled_by": None,
        "disable_reason": None,
    }
    assert code == 0 and json.loads(out) == alice
    code, _, err = run("user", "add", "bob", "--token", token)  # not an admin
    assert code == 2 and "admin" in err
    code, out, _ = run("user", "token", "alice", "--token", token)  # a token of its own
    assert code == 0 and out.strip().startswith("dl_") and out.strip() != token
    code, _, err = run("user", "add", "alice")
    assert code == 2 and "alice" in err
    assert run("user", "add", "root2", "--admin")[1].strip() == "user root2 (admin)"


def test_projects_are_added_listed_and_changed(server: str) -> None:
    code, out, _ = run("project", "add", "research", "--priority", "5", "--quota-gpus", "2")
    assert code == 0 and "priority 5, at most 2 GPUs, no memory quota" in out
    code, out, _ = run("project", "set", "research", "--quota-memory", "40GiB", "--json")
    data = json.loads(out)
    assert (data["priority"], data["quota_gpus"], data["quota_gpu_memory"]) == (5, 2, 40 << 30)
    code, out, _ = run("project", "set", "research", "--quota-gpus", "none")
    assert code == 0 and "no GPU quota, at most 40.0GiB" in out
    code, out, _ = run("project", "ls")
    assert code == 0 and "research" in out and "40.0GiB" in out and "share" in out
    code, out, _ = run("project", "set", "research", "--share", "2.5")
    assert code == 0 and "share 2.5" in out
    code, out, _ = run("project", "add", "heavy", "--share", "3", "--json")
    assert code == 0 and json.loads(out)["share"] == 3.0
    code, _, err = run("project", "set", "research", "--share", "0")
    assert code == 2 and "--share" in err
    code, _, err = run("project", "set", "research")
    assert code == 2 and "nothing to change" in err
    code, _, err = run("project", "add", "x", "--quota-gpus", "-1")
    assert code == 2 and "--quota-gpus" in err
    code, _, err = run("project", "add", "x", "--quota-memory", "lots")
    assert code == 2 and "--quota-memory" in err
    code, _, err = run("project", "set", "nowhere", "--priority", "1")
    assert code == 2 and "nowhere" in err


def test_tokens_are_listed_without_secrets_and_revoked(server: str) -> None:
    run("user", "add", "alice")
    first = run("user", "token", "alice", "--label", "laptop")[1].strip()
    second = run("user", "token", "alice", "--label", "ci")[1].strip()
    code, out, _ = run("user", "tokens", "alice", "--json", "--token", second)  # its own
    listed = json.loads(out)
    assert code == 0 and [t["name"] for t in listed] == ["laptop", "ci"]
    assert [t["prefix"] for t in listed] == [first.split("_")[1], second.split("_")[1]]
    assert first not in out and second not in out
    code, out, _ = run("user", "ls")
    assert code == 0 and "alice" in out and "admin" in out
    code, _, err = run("user", "ls", "--token", second)  # admin only
    assert code == 2 and "admin" in err
    code, out, _ = run("user", "revoke", "alice", first.split("_")[1])
    assert code == 0 and "revoked 1 token(s) of alice" in out
    code, _, err = run("whoami", "--token", first)
    assert code == 2 and "revoked" in err
    assert run("whoami", "--token", second)[0] == 0
    code, _, err = run("user", "revoke", "alice", first.split("_")[1])  # not live any more
    assert code == 2 and "not found" in err
    code, out, _ = run("user", "revoke", "alice", "--token", second)  # all of its own
    assert code == 0 and "revoked 1 token(s)" in out
    assert run("whoami", "--token", second)[0] == 2
    code, out, _ = run("user", "tokens", "alice", "--json")
    assert code == 0 and json.loads(out) == []


def test_a_users_os_account_is_set_listed_and_cleared(server: str) -> None:
    code, out, _ = run("user", "add", "bob", "--os-user", "bobby")
    assert code == 0 and "user bob (user), jobs run as OS account bobby" in out
    code, out, _ = run("user", "ls", "--json")
    bob = {
        "name": "bob",
        "role": "user",
        "os_user": "bobby",
        "quota_gpus": None,
        "disabled_at": None,
        "disabled_by": None,
        "disable_reason": None,
    }
    assert bob in json.loads(out)
    code, out, _ = run("user", "set", "bob", "--os-user", "none", "--json")
    assert code == 0 and json.loads(out)["os_user"] is None
    code, _, err = run("user", "set", "bob", "--os-user", "Root!")
    assert code == 2 and "os_user" in err and "not an OS account name" in err
    code, _, err = run("user", "set", "bob")
    assert code == 2 and "nothing to change" in err
    code, _, err = run("user", "set", "nobody", "--os-user", "x")
    assert code == 2 and "nobody" in err


def test_an_empty_os_account_is_refused(server: str) -> None:
    """``--os-user "$ACCOUNT"`` with the variable unset cleared the user's account (its jobs
    moved to the account named like it) or added it without one, without a word."""
    assert run("user", "add", "bob", "--os-user", "bobby")[0] == 0
    for args in (("user", "set", "bob", "--os-user", ""), ("user", "add", "eve", "--os-user", " ")):
        code, _, err = run(*args)
        assert code == 2 and "--os-user" in err and "is empty" in err, err
    code, out, _ = run("user", "ls", "--json")
    users = {u["name"]: u for u in json.loads(out)}
    assert users["bob"]["os_user"] == "bobby" and "eve" not in users


def test_a_tables_first_column_is_never_cut_on_a_narrow_terminal() -> None:
    """``danlu webhook ls`` in 80 columns showed the webhook's id wrapped over two lines,
    and ``webhook rm`` / ``deliveries`` take the whole id."""
    ident = "whk_0123456789abcdef01234567"
    url = "https://hooks.example.com/" + "x" * 60
    table = titled_table(
        "webhooks",
        ("ID", "URL", "STATES", "FOR", "PENDING", "DELIVERED", "FAILED", "LAST ERROR"),
        [(ident, url, "SUCCEEDED,FAILED", "everyone", "0", "12", "3", "timed out " * 4)],
    )
    console = Console(width=80, record=True)
    console.print(table)
    text = console.export_text()
    assert ident in text and max(len(line) for line in text.splitlines()) <= 80


def test_a_share_the_policy_does_not_weigh_is_noted(server: str) -> None:
    """The reply's note reached API and --json users only: the line said nothing of it."""
    code, out, _ = run("project", "add", "vision", "--share", "2")
    assert code == 0 and "project vision" in out
    assert "note: share 2 is kept, but only the fair-share policy weighs projects by it" in out
    code, out, _ = run("project", "set", "vision", "--share", "3")
    assert code == 0 and "note: share 3 is kept" in out
    code, out, _ = run("project", "set", "vision", "--priority", "1")
    assert code == 0 and "note:" not in out  # the share not given: nothing to tell
