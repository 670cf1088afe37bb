"""``danlu server --executor ray`` on a home another running plane holds is refused with
:class:`~danlu.server.main.HomeInUse` (``danlu server`` exits 3) before it joins Ray: the
start-up joined the cluster first (a driver of it, or a local Ray cluster started where the
address names none), to check that no other home's plane claims it, and only then found its
home in use. The fake Ray of ``fake_ray``, with its joins recorded; once the home is free,
the start-up joins as before."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from fake_ray import FakeRay

import danlu.server.main as main
from danlu.config import load_settings


def _record_joins(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The fake Ray, not joined until ``ray.init``: each join's arguments, in order."""
    joins: list[dict[str, Any]] = []
    ray = sys.modules["ray"]
    monkeypatch.setattr(ray, "is_initialized", lambda: bool(joins), raising=False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: joins.append(kwargs), raising=False)
    return joins


def test_a_home_in_use_is_refused_before_ray_is_joined(
    fake: FakeRay, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    joins = _record_joins(monkeypatch)
    home = tmp_path / "home"
    home.mkdir()
    settings = load_settings(home=home, executor="ray")  # --ray-address auto
    held = main.lock_home(home)  # the other plane, running on the home
    try:
        with pytest.raises(main.HomeInUse, match="is in use by another danlu server"):
            main.prepare(settings, port=0, start_loops=False, announce=lambda _: None)
    finally:
        held.close()
    assert joins == []  # refused before joining the cluster
    assert not (home / "danlu.db").exists()
    started = main.prepare(settings, port=0, start_loops=False, announce=lambda _: None)
    try:
        assert [join.get("address") for join in joins] == ["auto"]  # free: joined as before
    finally:
        started.app.state.danlu.executor.close()
        started.close()
