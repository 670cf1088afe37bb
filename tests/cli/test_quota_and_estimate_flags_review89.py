"""Flags that were read as something else than written, now refused naming the flag (exit
2, nothing sent or traced): ``--quota-gpus 1_6`` (``float`` read 16) or in other scripts'
digits; ``danlu estimate --gpu-memory ""`` (read as not given: verdicts against the whole
GPU) and ``--gpu-table ""`` (the current directory read as the table)."""

from __future__ import annotations

import json

import pytest
import typer
from cli_fake_api import FakeApi, serve_commands
from typer.testing import CliRunner

from danlu.cli import admin as admin_cli
from danlu.cli import estimate as estimate_cli


def _admin_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    admin_cli.register(app)
    return app


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_commands(monkeypatch)


@pytest.mark.parametrize("value", ["1_6", "\u0661\u0666", "1_0.5"])
@pytest.mark.parametrize(
    "command",
    [["project", "set", "research"], ["project", "add", "research"], ["user", "set", "a"]],
)
def test_a_quota_not_written_plainly_is_refused(
    api: FakeApi, command: list[str], value: str
) -> None:
    result = CliRunner().invoke(_admin_app(), [*command, "--quota-gpus", value])
    assert result.exit_code == 2, result.output
    error = " ".join(result.stderr.split())
    assert error.startswith("error: --quota-gpus: give a number of GPUs >= 0"), error
    assert api.requests == []


@pytest.mark.parametrize(("value", "sent"), [("16", 16.0), ("0.5", 0.5), (" 8 ", 8.0), ("1e1", 10)])
def test_a_plain_quota_is_sent_as_before(api: FakeApi, value: str, sent: float) -> None:
    CliRunner().invoke(_admin_app(), ["project", "set", "research", "--quota-gpus", value])
    assert api.requests
    assert json.loads(api.requests[-1].content)["quota_gpus"] == sent


ESTIMATE = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
estimate_cli.register(ESTIMATE)
ESTIMATE.command("noop", hidden=True)(lambda: None)  # keeps ``estimate`` a subcommand


@pytest.mark.parametrize(
    ("flag", "fix"),
    [
        ("--gpu-memory", "give a memory limit per GPU such as 20GiB"),
        ("--gpu-table", "give a JSON file of GPUs"),
    ],
)
@pytest.mark.parametrize("value", ["", " "])
def test_estimate_refuses_an_empty_flag(
    monkeypatch: pytest.MonkeyPatch, flag: str, fix: str, value: str
) -> None:
    def no_trace(*args: object, **kwargs: object) -> None:
        raise AssertionError("traced: the empty flag was taken")

    monkeypatch.setattr(estimate_cli, "run_estimate", no_trace)
    result = CliRunner().invoke(ESTIMATE, ["estimate", "m:f", "--batch-size", "1", flag, value])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {flag}: empty; {fix}"), result.stderr
