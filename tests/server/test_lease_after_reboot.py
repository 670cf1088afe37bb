"""A control plane started again on its home after its host rebooted (or its container
restarted: another pid namespace) waited for its own old ``scheduler`` lease to lapse (its
TTL and 2 s more): the lease's owner names the machine by its boot id and pid namespace, and
one of another boot was judged as a clone's, whose pids cannot be judged here. The plane that
takes the lease now names itself in its home's lock file, whose ``flock`` it holds for as long
as it lives: the next plane of the home, holding that lock, takes the lease of the plane named
there at once (:func:`~danlu.server.plane_owner.gone_from_home`). A live plane keeps its home
and its lease. Two boots are the kernel's boot id monkeypatched, in one process."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text

import danlu.server.main as main
from danlu.config import load_settings
from danlu.executors import procs
from danlu.server import plane_owner
from danlu.server.db import Database, Lease, make_engine
from danlu.server.db import migrate as migrate_module
from danlu.server.plane_lease import IN_USE_EXIT, LEASE, owner_id, wait_before_upgrading

NOW = 1_000_000.0
OLDER = "0034"
"""A revision older than the newest, which every danlu since has migrated from."""


def boot(monkeypatch: pytest.MonkeyPatch, boot_id: str) -> None:
    """Run as this host booted as ``boot_id``."""
    monkeypatch.setattr(procs, "boot_id", lambda: boot_id)


def start(home: Path) -> main.Prepared:
    """A plane of ``home`` that takes the lease as it starts, as ``danlu server`` does."""
    settings = load_settings(home=home, interval=0.5)
    return main.prepare(
        settings, port=0, fake_gpus="1x80GiB", start_loops=True, announce=lambda _: None
    )


def lease_owner(home: Path) -> str | None:
    db = Database(f"sqlite:///{home / 'danlu.db'}")
    try:
        with db.session() as session:
            lease = session.get(Lease, LEASE)
            return lease.lock_owner if lease is not None else None
    finally:
        db.dispose()


def test_a_restart_after_a_reboot_takes_the_home_s_own_lease_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    boot(monkeypatch, "boot-1")
    before = start(home)
    old = owner_id()
    assert before.home_lock is not None
    before.home_lock.close()  # the host lost its power: the lock went with the process,
    before.sock.close()  # the lease stayed
    boot(monkeypatch, "boot-2")
    with caplog.at_level(logging.INFO, logger="danlu.server.plane_lease"):
        again = start(home)
    try:
        said = [r.getMessage() for r in caplog.records]
        assert not [m for m in said if "waiting up to" in m], said  # not its TTL waited out
        assert any(f"from {old}, the last plane of this home" in m for m in said), said
        assert lease_owner(home) == owner_id() != old
        assert (home / "server.lock").read_text().strip() == owner_id()  # for the next one
    finally:
        again.close()


def test_a_live_plane_of_another_boot_keeps_its_home_and_its_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another pid namespace on this host (a container of its own) sharing the home: the
    second plane is refused by the home's lock (exit 3), the first's lease left alone."""
    home = tmp_path / "home"
    boot(monkeypatch, "boot-1")
    live = start(home)
    try:
        held = owner_id()
        boot(monkeypatch, "boot-2")
        with pytest.raises(main.HomeInUse, match="is in use by another danlu server") as refused:
            start(home)
        assert refused.value.exit_code == IN_USE_EXIT
        assert lease_owner(home) == held
    finally:
        live.close()


def test_only_the_home_s_last_plane_of_another_boot_is_taken_for_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone_from_home, HomeHolder = plane_owner.gone_from_home, plane_owner.HomeHolder
    settings = load_settings(home=tmp_path / "home")
    home = plane_owner.plane_home(settings)
    boot(monkeypatch, "boot-1")
    earlier = owner_id()
    last = HomeHolder(earlier, home)
    boot(monkeypatch, "boot-2")
    assert gone_from_home(earlier, home, last)
    other_home = plane_owner.plane_home(load_settings(home=tmp_path / "other"))
    assert not gone_from_home(earlier, other_home, last)  # the lease names another home
    assert not gone_from_home(earlier, home, None)  # the lock names no plane
    assert not gone_from_home(earlier, home, HomeHolder(owner_id(), home))  # not that one
    assert not gone_from_home(owner_id(), home, HomeHolder(owner_id(), home))  # this boot's:
    # judged by its pid (dead_here), this process alive
    elsewhere = earlier.replace(socket.gethostname(), "another-host", 1)
    assert not gone_from_home(elsewhere, home, HomeHolder(elsewhere, home))


def test_an_older_database_is_migrated_at_once_after_a_reboot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait before migrating a database an older danlu's plane uses
    (:func:`~danlu.server.plane_lease.wait_before_upgrading`) does not wait for the home's own
    plane of an earlier boot either (this host's danlu upgraded across the reboot)."""
    url = f"sqlite:///{tmp_path / 'older.db'}"
    engine = make_engine(url)
    config = migrate_module.alembic_config()
    boot(monkeypatch, "boot-1")
    earlier = owner_id()
    home = plane_owner.plane_home(load_settings(home=tmp_path / "home", database_url=url))
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, OLDER)
            conn.execute(
                text(
                    "INSERT INTO leases (id, lock_token, lock_owner, lock_expires_at, home) "
                    "VALUES (:id, 'token-1', :owner, :expires, :home)"
                ),
                {"id": LEASE, "owner": earlier, "expires": NOW + 10, "home": home},
            )
    finally:
        engine.dispose()
    boot(monkeypatch, "boot-2")
    clock = [NOW]

    def sleep(seconds: float) -> None:
        clock[0] += max(seconds, 0.5)

    last = plane_owner.HomeHolder(earlier, home)
    wait_before_upgrading(url, clock=lambda: clock[0], sleep=sleep, last=last)
    assert clock == [NOW]  # went on at once: no wait for the lease to lapse
