"""``danlu user disable / enable`` and the state ``danlu user ls`` shows, through Typer's
CliRunner against the real API app in this process on a SQLite store: a disabled user's
token is refused with a line saying so, no token is issued to them, and the last enabled
admin cannot be disabled; ``danlu user show`` gives a user's record and history, each
change by whom, to the user herself or an admin."""

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
from danlu.client import Client
from danlu.core.errors import SpecError

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


def test_a_user_is_disabled_listed_refused_and_enabled_again(server: str) -> None:
    assert run("user", "add", "alice")[0] == 0
    token = run("user", "token", "alice")[1].strip()
    assert run("whoami", "--token", token) == (0, "alice (user)\n", "")
    code, out, _ = run("user", "disable", "alice")
    assert code == 0, out
    assert out == "user alice disabled: their tokens are refused\n"  # no job of hers
    code, _, err = run("whoami", "--token", token)
    assert code == 2
    assert "'alice' is disabled" in err and "danlu user enable alice" in err
    code, _, err = run("user", "token", "alice")
    assert code == 2 and "disabled" in err and "danlu user enable alice" in err
    code, out, _ = run("user", "ls")
    alice, admin = (  # by the first cell: alice's state names the admin who disabled her
        [line for line in out.splitlines() if line.startswith(f"│ {n} ")]
        for n in ("alice", "admin")
    )
    assert len(alice) == 1 and "disabled since" in alice[0], out
    assert len(admin) == 1 and "enabled" in admin[0] and "disabled" not in admin[0], out
    assert "state" in out
    code, out, _ = run("user", "ls", "--json")
    listed = {u["name"]: u for u in json.loads(out)}
    assert isinstance(listed["alice"]["disabled_at"], float)
    code, out, _ = run("user", "enable", "alice")
    assert (code, out) == (0, "user alice enabled: their tokens work again\n")
    assert run("whoami", "--token", token)[0] == 0
    code, out, _ = run("user", "disable", "alice", "--cancel-jobs", "--json")
    reply = json.loads(out)
    assert code == 0 and reply["user"]["name"] == "alice"
    assert (reply["queued"], reply["running"], reply["cancelled"], reply["stopping"]) == (
        0,
        0,
        0,
        0,
    )


def test_the_lines_count_the_users_jobs(server: str, tmp_path: Path) -> None:
    """No loop runs here: a job submitted stays queued."""
    spec = tmp_path / "job.yaml"
    spec.write_text("name: waits\ncommand: [python, -c, 'print(1)']\nresources: {gpus: 1}\n")
    run("user", "add", "alice")
    token = run("user", "token", "alice")[1].strip()
    assert run("submit", str(spec), "--token", token)[0] == 0
    code, out, _ = run("user", "disable", "alice")
    assert (code, out) == (
        0,
        "user alice disabled: their tokens are refused; 1 queued job not started until "
        "enabled again (danlu user enable alice)\n",
    )
    code, out, _ = run("user", "enable", "alice")
    assert out == "user alice enabled: their tokens work again; 1 queued job may start\n"
    code, out, _ = run("user", "disable", "alice", "--cancel-jobs")
    assert out == (
        "user alice disabled: their tokens are refused; 1 queued job cancelled, 0 running "
        "jobs being stopped\n"
    )


def test_the_last_enabled_admin_and_a_plain_user_are_refused(server: str) -> None:
    code, _, err = run("user", "disable", "admin")
    assert code == 2 and "last enabled admin" in err and "--admin" in err
    assert run("whoami")[0] == 0
    run("user", "add", "bob")
    bob = run("user", "token", "bob")[1].strip()
    code, _, err = run("user", "disable", "admin", "--token", bob)
    assert code == 2 and "admins" in err
    code, _, err = run("user", "enable", "nobody")
    assert code == 2 and "nobody" in err and "not found" in err


def test_the_client_refuses_a_cancel_jobs_that_is_not_a_boolean() -> None:
    client = Client("http://127.0.0.1:9", "dl_abcdefgh_" + "x" * 30)
    with pytest.raises(SpecError) as refused:
        client.disable_user("alice", "no")  # type: ignore[arg-type]
    assert refused.value.field == "cancel_jobs"


def test_the_reason_is_sent_shown_by_user_ls_and_in_the_refusal(server: str) -> None:
    run("user", "add", "alice")
    token = run("user", "token", "alice")[1].strip()
    code, _, err = run("user", "disable", "alice", "--reason", "left\nthe team")
    assert code == 2 and "reason" in err and "control characters" in err
    code, out, _ = run("user", "disable", "alice", "--reason", "left the team [ops]")
    assert (code, out) == (
        0,
        "user alice disabled (left the team [ops]): their tokens are refused\n",
    )
    code, out, _ = run("user", "ls")
    (alice,) = [line for line in out.splitlines() if line.startswith("│ alice ")]
    assert "by admin: left the team [ops]" in alice, out
    code, _, err = run("whoami", "--token", token)
    assert code == 2 and "'alice' is disabled (by admin: left the team [ops])" in err


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
