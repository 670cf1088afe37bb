"""A ``danlu server`` refused because another control plane renews the database's lease exits
with a status of its own (:data:`~danlu.server.plane_lease.DATABASE_IN_USE_EXIT`), which
docs/deploy.md's systemd unit names in ``RestartPreventExitStatus=``: it exited 2, as any
refused start-up, and systemd's ``Restart=on-failure`` started it again every ~12 s for ever.
The clocks are injected: nothing sleeps for the lease's length."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli import server as server_cli
from danlu.config import Settings
from danlu.server import main, plane_lease
from danlu.server.db import Database, upgrade_database
from danlu.server.plane_lease import DATABASE_IN_USE_EXIT, LEASE
from danlu.server.services import locks

NOW = 1_000_000.0
OTHER = "farhost:77:5"
"""The live plane's owner: a process of another host."""
DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def _cli() -> typer.Typer:
    app = typer.Typer()
    server_cli.register(app)
    return app


def test_a_plane_refused_for_a_live_holder_exits_with_its_own_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    upgrade_database(url)
    db = Database(url)
    clock = [NOW]

    def renew() -> None:  # the other plane, alive: it renews its lease every pass
        with db.session() as s:
            assert locks.acquire_lease(s, LEASE, "other", 10, clock[0], OTHER)

    def sleep(seconds: float) -> None:
        clock[0] += max(seconds, 1.0)
        renew()

    real = plane_lease.take_scheduler_lease

    def take(db: Database, settings: Settings, **kwargs: Any) -> str:
        return real(db, settings, **{**kwargs, "clock": lambda: clock[0], "sleep": sleep})

    monkeypatch.setattr(main, "take_scheduler_lease", take)
    monkeypatch.setattr(main, "run", lambda *_args, **_kwargs: None)  # never serves
    try:
        renew()
        args = ["server", "--home", str(tmp_path / "home"), "--database-url", url]
        result = CliRunner().invoke(_cli(), [*args, "--fake-gpus", "1x80GiB", "--port", "0"])
    finally:
        db.dispose()
    assert result.exit_code == DATABASE_IN_USE_EXIT != 2, result.output
    assert "keeps renewing" in result.output and OTHER.split(":")[0] in result.output


def test_the_documented_unit_does_not_restart_a_plane_refused_so() -> None:
    """The unit in docs/deploy.md names the status in ``RestartPreventExitStatus=``."""
    unit = DEPLOY.read_text(encoding="utf-8").split("```ini", 1)[1].split("```", 1)[0]
    prevented = re.search(r"^RestartPreventExitStatus=(.+)$", unit, re.MULTILINE)
    assert prevented is not None, unit
    assert str(DATABASE_IN_USE_EXIT) in prevented.group(1).split()
    assert "Restart=on-failure" in unit
