"""An empty flag value (a script's unset variable: ``--token "$TOKEN"``) is refused naming
the flag, with exit 2 and nothing sent or started, by the commands that read it as not given
(the home's admin token, the default, every sweep), took it for the current directory
(``--home ""``, ``--workdir ""``, ``sweep submit ""``) or sent it on to a confusing
answer (``webhook add --project ""``); ``danlu up`` and ``danlu server`` refuse their
empty text flags (``--host ""`` listened on every interface). Against the in-memory API
of ``cli_fake_api`` (``up``: with the server's ``prepare`` replaced)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from cli_fake_api import FakeApi, serve_commands
from typer.testing import CliRunner

from danlu.cli import admin as admin_cli
from danlu.cli import jobs as jobs_cli
from danlu.cli import run as run_cli
from danlu.cli import server as server_cli
from danlu.cli import sweep as sweep_cli
from danlu.cli import webhook as webhook_cli
from danlu.core.errors import ConfigError

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
for module in (jobs_cli, run_cli, server_cli, sweep_cli, webhook_cli, admin_cli):
    module.register(APP)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_commands(monkeypatch)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, " ".join(result.stderr.split())


def _commands(job: str) -> list[list[str]]:
    return [
        ["cancel", job],
        ["wait", job],
        ["sweep", "ls"],
        ["sweep", "show", "s1"],
        ["webhook", "ls"],
        ["project", "ls"],
        ["run", "--", "true"],
    ]


@pytest.mark.parametrize("flag", ["--token", "--url"])
@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize("which", range(7))
def test_an_empty_url_or_token_is_refused_not_replaced_by_the_homes(
    api: FakeApi, flag: str, value: str, which: int
) -> None:
    job = api.add_job("train", "SUCCEEDED")["id"]
    api.submitted_progress = ["SUCCEEDED"]  # the old code's `run` then ends at once
    command = _commands(job)[which]
    at = command.index("--") if "--" in command else len(command)
    code, out, err = run(*command[:at], flag, value, *command[at:])
    assert code == 2, (out, err)
    assert err.startswith(f"error: {flag}: empty; give "), err
    assert f"or leave {flag} out for the home's" in err
    assert api.requests == []  # nothing went out with the home's (admin) credentials


@pytest.mark.parametrize("which", range(7))
def test_an_empty_home_is_refused_not_read_as_the_current_directory(
    api: FakeApi, which: int
) -> None:
    job = api.add_job("train", "SUCCEEDED")["id"]
    api.submitted_progress = ["SUCCEEDED"]
    command = _commands(job)[which]
    at = command.index("--") if "--" in command else len(command)
    code, _, err = run(*command[:at], "--home", "", *command[at:])
    assert code == 2
    assert err.startswith("error: --home: empty; give the server's home directory"), err
    assert api.requests == []


def test_a_given_token_and_home_still_reach_the_server(api: FakeApi, tmp_path: Path) -> None:
    job = api.add_job("train", "RUNNING")["id"]
    code, out, err = run("cancel", job, "--token", "t", "--url", "http://x", "--home", " ")
    assert code == 0, err
    assert "cancelled" in out
    assert [r.url.path for r in api.requests] == [f"/api/v1/jobs/{job}/cancel"]


@pytest.mark.parametrize("states", [[""], [" "], ["RUNNING,"], ["RUNNING", ""]])
def test_sweep_ls_refuses_an_empty_state(api: FakeApi, states: list[str]) -> None:
    args = [arg for state in states for arg in ("--state", state)]
    code, out, err = run("sweep", "ls", *args)
    assert (code, out) == (2, "")
    assert err.startswith("error: --state: empty; give a sweep state (RUNNING, DONE"), err
    assert "or leave --state out to list every sweep" in err
    assert api.requests == []


def test_sweep_ls_still_sends_the_states_given(api: FakeApi) -> None:
    code, _, err = run("sweep", "ls", "--state", "running, done", "--state", "FAILED")
    assert code == 0, err
    assert api.requests[0].url.params.get_list("state") == ["running", "done", "FAILED"]


def test_sweep_submit_refuses_an_empty_spec_path(api: FakeApi) -> None:
    code, _, err = run("sweep", "submit", "")
    assert code == 2
    assert err == "error: SPEC: empty; give the sweep spec file (YAML or JSON)"
    assert api.requests == []


@pytest.mark.parametrize("flag", ["--project", "--user"])
@pytest.mark.parametrize("value", ["", " "])
def test_webhook_add_refuses_an_empty_project_or_user(api: FakeApi, flag: str, value: str) -> None:
    code, _, err = run("webhook", "add", "https://hooks.example/x", flag, value)
    assert code == 2
    what = flag[2:]
    assert err == (
        f"error: {flag}: empty; give a {what}, or leave {flag} out to be told of every "
        f"{what}'s jobs"
    )
    assert api.requests == []  # the server answered: "project '' not found; add it first"


@pytest.mark.parametrize("value", ["", "  "])
def test_run_refuses_an_empty_name_not_taking_the_programs(api: FakeApi, value: str) -> None:
    api.submitted_progress = ["SUCCEEDED"]
    code, _, err = run("run", "--name", value, "--", "true")
    assert code == 2
    assert err == "error: --name: empty; give a job name, or leave --name out for the program's"
    assert api.requests == []


def test_run_refuses_an_empty_workdir_not_starting_here(api: FakeApi) -> None:
    api.submitted_progress = ["SUCCEEDED"]
    code, _, err = run("run", "--workdir", "", "--", "true")
    assert code == 2
    assert err == "error: --workdir: empty; give a directory, or leave --workdir out for this one"
    assert api.requests == []


def test_run_still_takes_a_name_and_workdir(api: FakeApi, tmp_path: Path) -> None:
    api.submitted_progress = ["SUCCEEDED"]
    code, _, err = run("run", "--name", "n1", "--workdir", str(tmp_path), "--", "true")
    assert code == 0, err
    body = api.requests[0].content.decode()
    assert '"name":"n1"' in body.replace(" ", "") and str(tmp_path) in body


# -- danlu up / danlu server -------------------------------------------------------------------


class Prepared(Exception):
    """The server's ``prepare`` was reached (the test's stand-in stops there)."""


@pytest.fixture
def prepared(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The calls of the server's ``prepare`` (none made: each stops the command, exit 2)."""
    import danlu.server.main as server_main

    calls: list[dict[str, Any]] = []

    def prepare(settings: Any, **given: Any) -> None:
        calls.append({"settings": settings, **given})
        raise ConfigError("prepare reached")

    monkeypatch.setattr(server_main, "prepare", prepare)
    return calls


UP_FLAGS = [
    "--fake-gpus",
    "--policy",
    "--host",
    "--database-url",
    "--executor",
    "--slurm-partition",
    "--ray-address",
]


@pytest.mark.parametrize("command", ["up", "server"])
@pytest.mark.parametrize("flag", UP_FLAGS)
def test_up_refuses_an_empty_text_flag(
    prepared: list[dict[str, Any]], tmp_path: Path, command: str, flag: str
) -> None:
    code, _, err = run(command, "--home", str(tmp_path / "home"), flag, "")
    assert code == 2
    assert err.startswith(f"error: {flag}: empty; give "), err
    assert prepared == []  # nothing made, nothing listening


def test_up_says_how_to_listen_on_every_interface(prepared: list[dict[str, Any]]) -> None:
    code, _, err = run("up", "--host", " ")
    assert code == 2
    assert "127.0.0.1 (the default), or 0.0.0.0 for every one" in err
    assert prepared == []


@pytest.mark.parametrize("command", ["up", "server"])
def test_up_refuses_an_empty_home_not_taking_the_current_directory(
    prepared: list[dict[str, Any]], command: str
) -> None:
    code, _, err = run(command, "--home", "")
    assert code == 2
    assert err == (
        "error: --home: empty; give the state directory, or leave --home out for DANLU_HOME "
        "or ~/.danlu"
    )
    assert prepared == []


def test_up_still_takes_its_flags(prepared: list[dict[str, Any]], tmp_path: Path) -> None:
    code, _, err = run(
        "up", "--home", str(tmp_path / "home"), "--host", "0.0.0.0", "--fake-gpus", "2x80GiB"
    )
    assert code == 2 and "prepare reached" in err  # the stand-in's stop
    assert len(prepared) == 1
    assert prepared[0]["host"] == "0.0.0.0" and prepared[0]["fake_gpus"] == "2x80GiB"
    assert prepared[0]["settings"].home == tmp_path / "home"
