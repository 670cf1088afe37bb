"""``danlu up --port`` / ``danlu server --port`` take the port in plain digits: ``8_470``
(read as 8470 by ``int``) and other scripts' digits are refused naming ``--port``, exit 2,
before anything starts; ``8470``, ``0`` and a port the server then refuses (``70000``) are
passed on as before."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli import server as server_cli

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
server_cli.register(APP)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(server_cli, "_start", lambda **given: calls.append(given))
    return calls


@pytest.mark.parametrize("command", ["up", "server"])
@pytest.mark.parametrize("port", ["8_470", "\u0668\u0664\u0667\u0660", "84.70", "", "http"])
def test_a_port_not_in_plain_digits_is_refused(
    started: list[dict[str, Any]], command: str, port: str
) -> None:
    result = CliRunner().invoke(APP, [command, "--port", port])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: --port: {port!r} is not a port; write it in plain")
    assert started == []


@pytest.mark.parametrize(("port", "number"), [("8470", 8470), ("0", 0), ("70000", 70000)])
def test_a_port_in_digits_is_passed_on(
    started: list[dict[str, Any]], port: str, number: int
) -> None:
    result = CliRunner().invoke(APP, ["up", "--port", port])
    assert result.exit_code == 0, result.output
    assert [call["port"] for call in started] == [number]


def test_no_port_leaves_it_to_the_settings(started: list[dict[str, Any]]) -> None:
    assert CliRunner().invoke(APP, ["server"]).exit_code == 0
    assert started[0]["port"] is None
