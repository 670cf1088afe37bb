"""``danlu server --executor ray`` started for a second home onto a Ray cluster (a fake Ray:
``fake_ray``) whose first home's plane runs is refused with a :class:`ConfigError` (``danlu
server`` prints it and exits 2) naming that plane; once it has stopped, the second starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_ray import FakeRay

import danlu.server.main as main
from danlu.config import load_settings
from danlu.core.errors import ConfigError


def start(home: Path) -> main.Prepared:
    settings = load_settings(home=home, executor="ray", ray_address="10.0.0.9:6379")
    return main.prepare(settings, port=0, start_loops=False, announce=lambda _: None)


def stop(prepared: main.Prepared) -> None:
    """As the server's stop does: the app's executor closed, the home and the port given up."""
    prepared.app.state.danlu.executor.close()
    prepared.close()


def test_a_second_home_is_refused_while_the_first_plane_runs(fake: FakeRay, tmp_path: Path) -> None:
    first = start(tmp_path / "a")
    try:
        with pytest.raises(ConfigError) as refused:
            stop(start(tmp_path / "b"))
        said = str(refused.value)
        assert "the Ray cluster at 10.0.0.9:6379 is held by another danlu control plane" in said
        assert f"home {(tmp_path / 'a').resolve()} on " in said and first.url in said
        assert "cannot read the cluster's nodes" not in said  # not a cluster it cannot read
    finally:
        stop(first)
    stop(start(tmp_path / "b"))  # the first stopped: its claim given back
