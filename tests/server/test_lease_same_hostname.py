"""Two machines of one host name (containers or VMs cloned from one image) sharing a database:
a plane on host B read the live plane of host A as "a process of this host that is gone" (A's
pid is no process on B) and took its ``scheduler`` lease over at once, two planes scheduling
one database. The lease's owner now names the machine its pid is of (the kernel's boot id and
the pid namespace: :mod:`danlu.server.plane_owner`). Two "hosts" are the kernel's boot id
monkeypatched; the clocks are injected: nothing sleeps for the lease's length."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from danlu.config import load_settings
from danlu.executors import procs
from danlu.server import plane_lease
from danlu.server.db import Database, Lease, upgrade_database
from danlu.server.plane_lease import LEASE, DatabaseInUse, take_scheduler_lease
from danlu.server.services import locks

NOW = 1_000_000.0


def _on_host(monkeypatch: pytest.MonkeyPatch, boot: str) -> None:
    """Run as a machine of this host name whose kernel booted as ``boot``."""
    monkeypatch.setattr(procs, "boot_id", lambda: boot)


def test_a_live_plane_of_another_machine_of_this_host_name_keeps_its_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    upgrade_database(url)
    _on_host(monkeypatch, "boot-of-host-a")
    owner_a = plane_lease.owner_id()  # host A's plane (this process, on host A)
    _on_host(monkeypatch, "boot-of-host-b")
    monkeypatch.setattr(procs, "proc_start_time", lambda _pid: None)  # A's pid: none on B
    assert not plane_lease.dead_here(owner_a)
    db = Database(url)
    clock = [NOW]

    def renew() -> None:  # host A's plane, alive: it renews its lease every pass
        with db.session() as s:
            assert locks.acquire_lease(s, LEASE, "token-a", 10, clock[0], owner_a)

    def sleep(seconds: float) -> None:
        clock[0] += max(seconds, 1.0)
        renew()

    settings = load_settings(home=tmp_path / "home-b", database_url=url)
    try:
        renew()
        with pytest.raises(DatabaseInUse, match="keeps renewing it") as refused:
            take_scheduler_lease(db, settings, clock=lambda: clock[0], sleep=sleep)
        with db.session() as s:
            assert s.get(Lease, LEASE).lock_owner == owner_a  # type: ignore[union-attr]
    finally:
        db.dispose()
    said = str(refused.value)  # A named as another machine of this host's name
    assert f"on {socket.gethostname()} (another machine, container or boot of" in said, said
