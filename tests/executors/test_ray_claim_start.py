"""``danlu server --executor ray`` started for a second home onto a Ray cluster (a fake Ray:
``fake_ray``) whose first home's plane runs is refused with a :class:`ConfigError` (``danlu
server`` prints it and exits 2) naming that plane; once it has stopped, the second starts. The
refusal comes before the second home is made (it made the home and its database, then
claimed the cluster as its executor was built), and leaves a home made before as it was."""

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
        assert not (tmp_path / "b").exists()  # refused before its home and database were made
    finally:
        stop(first)
    stop(start(tmp_path / "b"))  # the first stopped: its claim given back


def files_of(home: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``home`` with its size and modification time."""
    return {
        str(path.relative_to(home)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in [home, *home.rglob("*")]
    }


def test_a_home_made_before_is_left_as_it_was_when_refused(fake: FakeRay, tmp_path: Path) -> None:
    stop(start(tmp_path / "b"))  # a home whose plane ran on this cluster before
    before = files_of(tmp_path / "b")
    first = start(tmp_path / "a")
    try:
        with pytest.raises(ConfigError, match="is held by another danlu control plane"):
            stop(start(tmp_path / "b"))
        assert files_of(tmp_path / "b") == before  # its database not migrated, no lock taken
    finally:
        stop(first)
