"""The ``scheduler`` lease is judged by its holder's TTL, recorded on its row when it took it
(revision 0034), not by the watcher's own: planes sharing a database may run with different
``DANLU_INTERVAL`` values, and a standby of a shorter interval took a live holder of a longer
one for dead (two planes leading). A row written before revision 0034 records no TTL: the
watcher's own stands in, as before. The clocks are injected: nothing sleeps for the lengths
stepped."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from helpers import user_and_nodes
from sqlalchemy import text
from test_clock_step_locks import Clock

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.errors import ConfigError
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server import plane_lease
from danlu.server.db import Database, Lease, head_revision, upgrade_database
from danlu.server.db.migrate import alembic_config
from danlu.server.plane_lease import LEASE, LEASE_GRACE, LEASE_WAIT_CAP, Holder, LeaseWatch
from danlu.server.reconcile import Reconciler

NOW = 1_000_000.0
HOUR = 3_600.0
NODES = (Node("a", 1, gpu_type("H100")),)


def _plane(db: Database, home: Path, steady: Clock, interval: float | None = None) -> Reconciler:
    executor = FakeExecutor(Cluster(NODES), FakeWorld())
    overrides = {} if interval is None else {"interval": interval}
    settings = load_settings(home=home, **overrides)
    return Reconciler(db, executor, settings, policy=make_policy("fifo"), monotonic=steady)


def _token(db: Database) -> str | None:
    with db.read_session() as s:
        lease = s.get(Lease, LEASE)
        return lease.lock_token if lease is not None else None


def _lease(db: Database) -> tuple[str | None, float | None]:
    """The lease's token and recorded TTL."""
    with db.read_session() as s:
        lease = s.get(Lease, LEASE)
        assert lease is not None
        return lease.lock_token, lease.ttl


def _renewing_sleep(
    clock: Clock, holder: Reconciler, holder_steady: Clock
) -> Callable[[float], None]:
    """A start-up's sleep on ``clock`` (an hour ahead of the holder's) during which the
    holder, of ``DANLU_INTERVAL=60``, runs a pass (renewing its lease) every 60 s."""

    def sleep(seconds: float) -> None:
        before = clock.now
        clock.now += max(seconds, 5.0)
        if (clock.now - NOW - HOUR) // 60 > (before - NOW - HOUR) // 60:  # its passes
            holder_steady.now = clock.now - NOW - HOUR
            assert holder.run_once(now=clock.now - HOUR).leader

    return sleep


def test_a_short_interval_standby_leaves_a_long_interval_holders_live_lease(
    db: Database, tmp_path: Path
) -> None:
    """The holder runs with ``DANLU_INTERVAL=60`` (a 300 s lease, renewed every 60 s), the
    standby with the default 2 s (a 10 s lease) on a host whose clock stepped an hour ahead,
    where every expiry looks past: the old standby took the lease once the row stayed
    unchanged for its own 10 s and 2 s more. It waits the holder's 300 s and 2 s more instead,
    and takes the lease once the holder is gone."""
    with db.session() as s:
        user_and_nodes(s, NODES, NOW)
    holder_steady, standby_steady = Clock(0.0), Clock(0.0)
    holder = _plane(db, tmp_path / "home", holder_steady, interval=60.0)
    standby = _plane(db, tmp_path / "home", standby_steady)
    assert (holder.ttl, standby.ttl) == (300.0, 10.0)
    try:
        assert holder.run_once(now=NOW).leader
        for elapsed in range(0, 181, 5):
            if elapsed and elapsed % 60 == 0:  # the holder's passes, every 60 s
                holder_steady.now = float(elapsed)
                assert holder.run_once(now=NOW + elapsed).leader, elapsed
            standby_steady.now = float(elapsed)
            assert not standby.run_once(now=NOW + HOUR + elapsed).leader, elapsed
        assert _token(db) == holder.token
        # the holder is gone after its pass at 180 s: taken once unchanged for 300 s + 2 s
        taken_at = None
        for elapsed in range(185, 181 + 3 * 300, 5):
            standby_steady.now = float(elapsed)
            if standby.run_once(now=NOW + HOUR + elapsed).leader:
                taken_at = elapsed
                break
        assert taken_at is not None
        assert 180 + 300 + LEASE_GRACE <= taken_at <= 180 + 300 + LEASE_GRACE + 5
        assert _lease(db) == (standby.token, 10.0)  # the new holder's own TTL recorded
    finally:
        holder.stop()
        standby.stop()


def test_a_short_interval_standby_waits_twice_a_long_holders_lease_whatever_its_expiry(
    db: Database, tmp_path: Path
) -> None:
    """A holder with ``DANLU_INTERVAL=600`` (a 3000 s lease) whose passes are 650 s apart
    (a pass of 50 s): its row stays unchanged for 650 s between renewals. The old standby (of
    the default interval) took it for dead after 600 s whatever its expiry; it waits twice
    the holder's lease (6000 s) instead."""
    with db.session() as s:
        user_and_nodes(s, NODES, NOW)
    holder_steady, standby_steady = Clock(0.0), Clock(0.0)
    holder = _plane(db, tmp_path / "home", holder_steady, interval=600.0)
    standby = _plane(db, tmp_path / "home", standby_steady)
    try:
        assert holder.run_once(now=NOW).leader
        for elapsed in (0.0, 300.0, 640.0, 649.0):
            standby_steady.now = elapsed
            assert not standby.run_once(now=NOW + elapsed).leader, elapsed
        holder_steady.now = 650.0
        assert holder.run_once(now=NOW + 650.0).leader
        assert _lease(db) == (holder.token, 3000.0)
    finally:
        holder.stop()
        standby.stop()


def test_start_up_of_a_short_interval_refuses_a_live_long_interval_holder(
    db: Database, tmp_path: Path
) -> None:
    """A plane of the default interval starting on a host whose clock is an hour ahead of
    the holder's (``DANLU_INTERVAL=60``, renewing every 60 s): the old start-up took the
    lease after 12 s unchanged; it is refused naming the holder instead."""
    holder_steady = Clock(0.0)
    holder = _plane(db, tmp_path / "home", holder_steady, interval=60.0)
    clock = Clock(NOW + HOUR)
    try:
        assert holder.run_once(now=NOW).leader

        sleep = _renewing_sleep(clock, holder, holder_steady)

        with pytest.raises(ConfigError, match="keeps renewing"):
            plane_lease.take_scheduler_lease(
                db, load_settings(home=tmp_path / "other"), clock=clock, sleep=sleep
            )
        assert _lease(db) == (holder.token, 300.0)
    finally:
        holder.stop()


def test_an_upgrade_waits_out_a_long_interval_holder_of_a_revision_with_its_ttl(
    db_url: str, db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before migrating a database at an older revision that records the lease's TTL (0034
    on: here the database is at the head, and a newer danlu starts on it), the start-up
    judges the older plane's lease by that TTL: the holder (``DANLU_INTERVAL=60``) renews
    every 60 s, and the start-up on a clock an hour ahead refuses to migrate instead of going
    on after its own 10 s and 2 s more."""
    monkeypatch.setattr(plane_lease, "known_older_revision", lambda _engine: "0034")
    holder_steady = Clock(0.0)
    holder = _plane(db, tmp_path / "home", holder_steady, interval=60.0)
    clock = Clock(NOW + HOUR)
    try:
        assert holder.run_once(now=NOW).leader

        sleep = _renewing_sleep(clock, holder, holder_steady)

        with pytest.raises(ConfigError, match="keeps renewing"):
            plane_lease.wait_before_upgrading(
                db_url, clock=clock, sleep=sleep, watch=LeaseWatch(10.0)
            )
    finally:
        holder.stop()


def test_a_row_without_a_ttl_is_judged_by_the_watchers_own() -> None:
    """A lease row written before revision 0034 (or holding a TTL no plane writes) is
    measured by the watcher's own TTL, as every row was before."""
    watch = LeaseWatch(300.0)
    for ttl in (None, 0.0, -5.0, math.nan, math.inf):
        holder = Holder("t", "far:1:1", NOW, None, ttl)
        assert watch.holder_ttl(holder) == 300.0
        assert watch.patience_for(holder) == LEASE_WAIT_CAP
    recorded = Holder("t", "far:1:1", NOW, None, 3000.0)
    assert watch.holder_ttl(recorded) == 3000.0
    assert watch.patience_for(recorded) == 6000.0
    # unchanged for the holder's TTL and the grace, its expiry past: dead
    assert not watch.lapsed(recorded, NOW + 1, 0.0)
    assert not watch.lapsed(recorded, NOW + 1, 3000.0 + LEASE_GRACE - 1)
    assert watch.lapsed(recorded, NOW + 1, 3000.0 + LEASE_GRACE)


def test_the_revisions_have_one_head() -> None:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert heads == [head_revision()] == ["0040"]


def test_an_upgrade_keeps_a_lease_row_and_its_rule(fresh_url: str, tmp_path: Path) -> None:
    """A database at 0033 whose lease a plane (now gone) held: the upgrade keeps the row, its
    TTL null; a standby judges it by its own TTL (it took it after its own 10 s and 2 s
    more), and records its own TTL when it takes it."""
    upgrade_database(fresh_url, "0033")
    old = Database(fresh_url)
    try:
        with old.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO leases (id, lock_token, lock_expires_at, lock_owner, home) "
                    "VALUES (:id, 'old', :expires, 'farhost:77:5', 'the old home')"
                ),
                {"id": LEASE, "expires": NOW + 10},
            )
    finally:
        old.dispose()
    upgrade_database(fresh_url)
    db = Database(fresh_url)
    with db.session() as s:
        user_and_nodes(s, NODES, NOW)
    steady = Clock(0.0)
    standby = _plane(db, tmp_path / "home", steady)
    try:
        with db.read_session() as s:
            lease = s.get(Lease, LEASE)
            assert lease is not None
            kept = (lease.lock_token, lease.lock_expires_at, lease.lock_owner, lease.home)
            assert kept == ("old", NOW + 10, "farhost:77:5", "the old home")
            assert lease.ttl is None
        for elapsed in (0.0, 5.0, 11.0):  # unchanged for 10 s and 2 s more, its expiry past
            steady.now = elapsed
            assert not standby.run_once(now=NOW + elapsed).leader, elapsed
        steady.now = 12.0
        assert standby.run_once(now=NOW + 12.0).leader
        assert _lease(db) == (standby.token, standby.ttl)
    finally:
        standby.stop()
        db.dispose()
