"""``danlu drain NODE --at TIME --until TIME``: the end of the maintenance window is sent,
shown by the command's line and by ``danlu nodes``, refused naming ``--until`` when it is not
later than the window's start, and dropped by ``danlu uncordon``. Through Typer's CliRunner,
against the real API app in this process on a SQLite store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from cli_real_api import real_api
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli import nodes as nodes_cli

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
jobs_cli.register(APP)
nodes_cli.register(APP)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with real_api(tmp_path, monkeypatch) as admin_token:
        yield admin_token


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_a_drain_window_with_an_end_is_sent_shown_and_undone(server: str) -> None:
    code, out, _ = run("nodes", "--json")
    name = json.loads(out)[0]["name"]

    code, _, err = run("drain", name, "--at", "+1h", "--until", "1970-01-02T00:00:00+00:00")
    assert code == 2 and "--until" in err and "not later than --at" in err
    code, _, err = run("drain", name, "--until", "+1h", "--gpu", "0")
    assert code == 2 and "--until" in err

    code, out, _ = run("drain", name, "--at", "+1h", "--until", "+4h", "-r", "firmware")
    assert code == 0, out
    assert "drain at " in out and " until " in out and out.rstrip().endswith(": firmware")
    code, out, _ = run("nodes", "--json")
    (node,) = json.loads(out)
    assert node["close_until"] - node["close_at"] == pytest.approx(4 * 3600, abs=5)
    assert node["open_at"] is None
    code, out, _ = run("nodes")
    assert code == 0 and " until " in out

    code, out, _ = run("drain", name, "--until", "+2h", "-r", "now")
    assert code == 0 and "draining (now); until " in out
    code, out, _ = run("uncordon", name, "--json")
    node = json.loads(out)
    assert (node["state"], node["open_at"], node["close_at"], node["close_until"]) == (
        "ready",
        None,
        None,
        None,
    )
