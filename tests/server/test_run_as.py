"""``DANLU_RUN_AS``: what the control plane checks and does to its home before it starts jobs
as their users' OS accounts (the jobs themselves: ``tests/executors/test_local_run_as.py``)."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import live_server

from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.server.run_as import check_run_as, close_home


def test_the_mode_is_checked(tmp_path: Path) -> None:
    assert load_settings(home=tmp_path, run_as="USER").run_as == "user"
    with pytest.raises(ConfigError, match="DANLU_RUN_AS"):
        load_settings(home=tmp_path, run_as="alice")


def test_it_needs_the_local_executor_and_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_run_as(load_settings(home=tmp_path))  # the default: nothing to check
    with pytest.raises(ConfigError, match="local executor"):
        check_run_as(load_settings(home=tmp_path, run_as="user", executor="slurm"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ConfigError, match="run it as root"):
        check_run_as(load_settings(home=tmp_path, run_as="user"))


@pytest.fixture
def umask_kept() -> Iterator[None]:
    """The process's umask as it was after the test (close_home sets it)."""
    was = os.umask(0o022)
    os.umask(was)
    try:
        yield
    finally:
        os.umask(was)


def test_the_home_is_closed_but_its_checkpoints_reachable(umask_kept: None) -> None:
    with tempfile.TemporaryDirectory(prefix="danlu-home-") as made:
        base = Path(made)
        base.chmod(0o711)
        home = base / "home"
        home.mkdir(mode=0o755)
        for name in ("admin.token", "danlu.db"):
            (home / name).write_text("x")
            (home / name).chmod(0o644)
        (home / "logs").mkdir(mode=0o755)
        close_home(home)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in home.iterdir()}
        assert stat.S_IMODE(home.stat().st_mode) == 0o711
        private = {"admin.token": 0o600, "danlu.db": 0o600, "logs": 0o700}
        assert modes == {**private, "checkpoints": 0o711}
        (home / "later.db-wal").write_text("x")  # written after: private by the umask
        assert stat.S_IMODE((home / "later.db-wal").stat().st_mode) == 0o600


def test_a_home_others_cannot_reach_is_refused(tmp_path: Path, umask_kept: None) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "home").mkdir()
    with pytest.raises(ConfigError, match=f"cannot enter {private}.*chmod o\\+x"):
        close_home(private / "home")


def test_an_os_user_no_job_could_run_as_is_refused_as_it_is_set(tmp_path: Path) -> None:
    """With ``DANLU_RUN_AS=user``, ``POST /users`` and ``PUT /users/NAME`` refuse an
    ``os_user`` that is root's or that this host lacks (a 422 naming ``os_user``, the
    user unchanged), rather than every job of that user's being refused later at
    submission; without it (jobs run as the control plane's user) any name is kept."""
    with live_server(tmp_path, start_loops=False) as live, live.client() as c:
        assert live.prepared is not None
        state = live.prepared.app.state.danlu
        assert c.post("/users", json={"name": "bob", "os_user": "root"}).status_code == 201
        state.settings = state.settings.model_copy(update={"run_as": "user"})
        for account in ("root", "dl-no-such-account"):
            made = c.post("/users", json={"name": "carol", "os_user": account})
            assert made.status_code == 422, made.text
            assert made.json()["error"]["field"] == "os_user"
            changed = c.put("/users/bob", json={"os_user": account})
            assert changed.status_code == 422, changed.text
            assert changed.json()["error"]["field"] == "os_user"
        assert "root's (uid 0)" in c.put("/users/bob", json={"os_user": "root"}).text
        assert [u["name"] for u in c.get("/users").json()] == ["admin", "bob"]
        assert c.put("/users/bob", json={"os_user": None}).status_code == 200  # checked at submit
        assert c.put("/users/bob", json={"quota_gpus": 2}).status_code == 200  # os_user not given
