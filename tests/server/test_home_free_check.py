""":func:`~danlu.server.main.check_home_free`, asked before a start-up reads or joins its
cluster: refuses a home whose lock a running plane holds, and makes nothing to ask (no home,
no lock file), nor keeps the lock, nor waits on a lock file that is a FIFO."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from danlu.server import main


def test_it_refuses_a_held_home_and_makes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    main.check_home_free(missing)
    assert not missing.exists()
    home = tmp_path / "home"
    home.mkdir()
    main.check_home_free(home)
    assert list(home.iterdir()) == []  # no lock file made to ask
    held = main.lock_home(home)  # another plane's
    try:
        with pytest.raises(main.HomeInUse, match="is in use by another danlu server"):
            main.check_home_free(home)
    finally:
        held.close()
    before = (home / "server.lock").stat().st_mtime_ns
    main.check_home_free(home)  # that plane gone: free
    main.lock_home(home).close()  # the check kept no lock
    assert (home / "server.lock").stat().st_mtime_ns == before
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "server.lock")
    main.check_home_free(fifo)  # not waited on: no writer will come
