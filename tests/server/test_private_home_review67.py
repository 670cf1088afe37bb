"""A control plane started on a home that already existed (a pre-made
``/var/lib/danlu``, ``mkdir -p`` before ``danlu up --home``) left it ``0755``, its database
(webhook secrets, every job's environment) ``0644`` and its jobs' logs readable by every local
account: ``mkdir(mode=0o700)`` applies only to a directory it makes. The home is made ``0700``
now when this user owns it (said in the log), the database is made ``0600`` (SQLite gives its
``-wal`` and ``-shm`` files the database's mode) and ``logs/`` ``0700`` with the logs an earlier
version left ``0644`` made ``0600``; a job's own files keep the job's usual umask (``0644``)."""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import live_server, submit, wait_state

from danlu.config import load_settings
from danlu.server.private_files import private_database, private_home

OTHERS = 0o077
"""The group and other permission bits."""


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """This process's umask 022 for the test (the jobs inherit it), as it was after."""
    was = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(was)


def _earlier_home(root: Path) -> Path:
    """A home as ``mkdir -p`` and an earlier danlu left it: ``0755``, a ``0644`` database
    with its ``-wal``, a ``0755`` ``logs/`` with a ``0644`` log."""
    home = root / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    for name in ("danlu.db", "danlu.db-wal"):
        (home / name).touch()
        (home / name).chmod(0o644)
    (home / "logs").mkdir()
    (home / "logs").chmod(0o755)
    (home / "logs" / "earlier.log").write_text("earlier job's secret\n")
    (home / "logs" / "earlier.log").chmod(0o644)
    return home


def test_an_existing_home_is_made_private_and_a_jobs_own_files_keep_their_mode(
    tmp_path: Path, usual_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    workdir = tmp_path / "work"
    workdir.mkdir()
    code = "open('out.txt', 'w').write('x'); print('job secret')"
    body = {"name": "w", "command": [sys.executable, "-c", code], "workdir": str(workdir)}
    with (
        caplog.at_level(logging.WARNING, logger="danlu.server.main"),
        live_server(tmp_path, fake_gpus="1x80GiB") as live,
    ):
        assert live.home == home
        with live.client() as c:
            job = submit(c, body)
            wait_state(c, job["id"], "SUCCEEDED", timeout=60)
        log = home / "logs" / f"{job['id']}.log"
        assert "job secret" in log.read_text()
        assert _mode(home) == 0o700
        assert _mode(home / "danlu.db") == 0o600
        for name in ("danlu.db-wal", "danlu.db-shm"):
            if (home / name).exists():  # while the store is open (WAL)
                assert _mode(home / name) == 0o600, name
        # the job's log: its own, in a directory no other account may enter, in a home likewise
        assert _mode(log) == 0o600
        assert _mode(log.parent) == 0o700
    assert _mode(workdir / "out.txt") == 0o644  # the job's own file: its usual umask
    warnings = [r.getMessage() for r in caplog.records]
    assert any(str(home) in w and "0700" in w and "0755" in w for w in warnings), warnings


def test_the_database_and_logs_an_earlier_version_left_readable_are_made_private(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = _earlier_home(tmp_path)
    settings = load_settings(home=home, fake_gpus="1x80GiB")
    with caplog.at_level(logging.WARNING, logger="danlu.server.main"):
        private_home(home)
        private_database(settings.db_url)
    assert _mode(home) == 0o700
    assert _mode(home / "danlu.db") == 0o600 and _mode(home / "danlu.db-wal") == 0o600
    assert _mode(home / "logs") == 0o700
    assert _mode(home / "logs" / "earlier.log") == 0o600
    assert (home / "logs" / "earlier.log").read_text() == "earlier job's secret\n"  # kept
    assert any("danlu.db" in r.getMessage() for r in caplog.records)


def test_a_new_database_is_made_private_before_sqlite_writes_it(tmp_path: Path) -> None:
    """SQLite makes its file ``0644`` (less the umask); it is made ``0600`` first, and its
    ``-wal`` and ``-shm`` then get the same mode from SQLite."""
    path = tmp_path / "elsewhere" / "store.db"
    private_database(f"sqlite:///{path}")
    assert path.exists() and path.stat().st_size == 0 and _mode(path) == 0o600
    assert _mode(path.parent) == 0o700


def test_a_postgresql_url_or_a_uri_is_left_alone(tmp_path: Path) -> None:
    private_database("postgresql+psycopg://danlu:pw@127.0.0.1:1/danlu")
    private_database(f"sqlite:///file:{tmp_path / 'x.db'}?mode=ro&uri=true")
    assert list(tmp_path.iterdir()) == []


def test_a_home_of_another_account_is_left_as_it_is_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A home this user does not own (root made it for a service account) is not changed
    (its owner decides), but the log says that other accounts may read it."""
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    monkeypatch.setattr(os, "geteuid", lambda: home.stat().st_uid + 1)
    with caplog.at_level(logging.WARNING, logger="danlu.server.main"):
        private_home(home)
    assert _mode(home) == 0o755
    assert any("chmod 700" in r.getMessage() for r in caplog.records), caplog.records
