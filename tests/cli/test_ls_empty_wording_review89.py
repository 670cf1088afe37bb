"""``danlu ls --project ""``: refused by the shared empty-value check
(:func:`danlu.cli.options.refuse_empty`), in the words ``danlu events`` and ``webhook add``
use (``give a project, or leave --project out ...``), exit 2, nothing sent."""

from __future__ import annotations

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
