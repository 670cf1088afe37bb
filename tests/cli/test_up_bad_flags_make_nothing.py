"""``danlu up`` / ``danlu server`` with a bad flag value refuse it before anything is made: a
port out of 0..65535 or a ``--host`` that is not an address of this machine (checks that need
no file) no longer leave the home directory behind (created, then the start refused)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli import server as server_cli

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
server_cli.register(APP)


@pytest.mark.parametrize("command", ["up", "server"])
@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--port", "99999"], "--port (DANLU_PORT): "),
        (["--port", "-1"], "--port (DANLU_PORT): "),
        (["--host", "nosuch.invalid"], "--host 'nosuch.invalid' "),
        (["--host", "192.0.2.1"], "--host '192.0.2.1' "),  # TEST-NET-1: no machine's own
        (["--host", "1.2.3.4.5"], "--host '1.2.3.4.5' "),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_a_bad_flag_is_refused_before_the_home_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, flags: list[str], named: str
) -> None:
    monkeypatch.delenv("DANLU_PORT", raising=False)
    home = tmp_path / "home"
    result = CliRunner().invoke(
        APP, [command, "--home", str(home), "--fake-gpus", "2x80GiB", *flags]
    )
    assert not home.exists(), sorted(p.name for p in home.iterdir())
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {named}"), result.stderr


def test_a_bad_port_from_the_environment_is_refused_before_the_home_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DANLU_PORT", "70000")
    home = tmp_path / "home"
    result = CliRunner().invoke(APP, ["up", "--home", str(home), "--fake-gpus", "2x80GiB"])
    assert not home.exists()
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: DANLU_PORT: "), result.stderr
