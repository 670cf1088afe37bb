"""One control plane per home: a second ``prepare`` on a locked home is refused with an error
naming the fix; the lock goes with the holder (closed, or the process gone)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.server.main import Prepared, lock_home, prepare


def _prepare(home: Path) -> Prepared:
    return prepare(
        load_settings(home=home, fake_gpus="1x80GiB"),
        port=0,
        start_loops=False,
        announce=lambda _text: None,
    )


def test_second_prepare_on_a_home_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = _prepare(home)
    try:
        with pytest.raises(ConfigError, match="in use by another danlu server") as err:
            _prepare(home)
        assert "--home" in str(err.value)
        other = _prepare(tmp_path / "other")  # another home is free
        other.close()
    finally:
        first.close()
    again = _prepare(home)  # released: the home can be served again
    again.close()


def test_the_lock_dies_with_its_process(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    code = (
        "import sys; from pathlib import Path; from danlu.server.main import lock_home; "
        "h = lock_home(Path(sys.argv[1])); print('locked', flush=True); sys.stdin.readline()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError):
            lock_home(home)
    finally:
        proc.kill()
        proc.wait(10)
    lock_home(home).close()  # the kernel dropped it with the process: no stale lock


def test_unusable_home_port_host_and_store_are_errors_naming_the_flag(tmp_path: Path) -> None:
    """What the operator gave that cannot be used is a :class:`ConfigError` naming the flag
    (and, for the store, its URL without the password), not a traceback from below."""
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ConfigError, match="--home"):
        _prepare(a_file)
    settings = load_settings(home=tmp_path / "home", fake_gpus="1x80GiB")
    for host, port, needle in (("127.0.0.1", 70000, "--port"), ("999.1.1.1", 0, "--host")):
        with pytest.raises(ConfigError, match=needle):
            prepare(settings, host=host, port=port, start_loops=False, announce=lambda _t: None)
    unreachable = load_settings(
        home=tmp_path / "pg",
        fake_gpus="1x80GiB",
        database_url="postgresql+psycopg://danlu:s3cret@127.0.0.1:1/danlu",
    )
    with pytest.raises(ConfigError, match="--database-url") as err:
        prepare(unreachable, port=0, start_loops=False, announce=lambda _t: None)
    assert "127.0.0.1" in str(err.value) and "s3cret" not in str(err.value)
    again = _prepare(tmp_path / "pg")  # the failed start gave the home back
    again.close()


def test_a_full_disk_at_start_up_says_to_free_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said to check that the database is running and reachable."""
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from danlu.server import main

    def full(_url: str) -> None:
        raise OperationalError(
            "CREATE TABLE", {}, sqlite3.OperationalError("database or disk is full")
        )

    monkeypatch.setattr(main, "upgrade_database", full)
    with pytest.raises(ConfigError, match="database or disk is full; free space on its disk"):
        _prepare(tmp_path / "home")
    monkeypatch.undo()
    _prepare(tmp_path / "home").close()  # the failed start gave the home back
