"""A ``danlu server`` refused because another running control plane holds its home exits with
the status of a plane refused for a database another plane uses (3), which docs/deploy.md's
systemd unit names in ``RestartPreventExitStatus=``: it exited 2, as any refused start-up, and
``Restart=on-failure`` started it again every few seconds for as long as the other ran."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli import server as server_cli
from danlu.server import main
from danlu.server.main import lock_home
from danlu.server.plane_lease import DATABASE_IN_USE_EXIT


def _cli() -> typer.Typer:
    app = typer.Typer()
    server_cli.register(app)
    return app


@pytest.mark.parametrize("command", ["server", "up"])
def test_a_plane_refused_for_a_home_in_use_exits_as_for_a_database_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setattr(main, "run", lambda *_args, **_kwargs: None)  # never serves
    held = lock_home(home)  # the other plane, running on the home
    try:
        args = [command, "--home", str(home), "--fake-gpus", "1x80GiB", "--port", "0"]
        result = CliRunner().invoke(_cli(), args)
    finally:
        held.close()
    assert result.exit_code == DATABASE_IN_USE_EXIT != 2, result.output
    assert "is in use by another danlu server" in result.output
    assert "--home" in result.output  # the fix named
    assert not (home / "danlu.db").exists()  # refused before the store is opened
