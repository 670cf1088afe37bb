"""``danlu ls --project "$P"`` with P unset: an empty --project, --user or --name is
refused naming the flag (it was sent as a filter no job matches: "no jobs", exit 0)."""

from __future__ import annotations

import json

import pytest
import typer
from cli_fake_api import FakeApi, serve_commands
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
jobs_cli.register(APP)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = serve_commands(monkeypatch)
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))
    return api


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("flag", ["--project", "--user", "--name"])
@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize("more", [(), ("--all",)])
def test_ls_refuses_an_empty_filter_naming_it(
    fake: FakeApi, flag: str, value: str, more: tuple[str, ...]
) -> None:
    fake.add_job("job-1", "SUCCEEDED")
    code, out, err = run("ls", flag, value, *more)
    assert code == 2 and out == ""
    assert f"{flag}: empty" in err
    assert not [r for r in fake.requests if r.url.path.endswith("/jobs")]


def test_ls_without_the_filters_lists_as_before(fake: FakeApi) -> None:
    fake.add_job("job-1", "SUCCEEDED")
    code, out, _ = run("ls", "--json")
    assert code == 0
    assert len(json.loads(out)) == 1


# the shared empty-value check's words (refuse_empty), as danlu events and
# webhook add say them
@pytest.mark.parametrize("flag", ["--project", "--user", "--name"])
@pytest.mark.parametrize("value", ["", " \t"])
def test_ls_empty_filter_has_the_shared_wording(fake: FakeApi, flag: str, value: str) -> None:
    result = CliRunner().invoke(APP, ["ls", flag, value])
    assert result.exit_code == 2 and result.stdout == ""
    what = flag[2:]
    assert result.stderr.strip() == (
        f"error: {flag}: empty; give a {what}, or leave {flag} out to list every one"
    )
    assert fake.requests == []


def test_ls_empty_filter_is_refused_before_a_bad_state(fake: FakeApi) -> None:
    """Both wrong: the empty filter is named first, as before (one error line)."""
    result = CliRunner().invoke(APP, ["ls", "--user", "", "--state", "nope"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --user: empty;")
    assert fake.requests == []
