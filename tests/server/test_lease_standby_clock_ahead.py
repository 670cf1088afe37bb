"""The ``scheduler`` lease across hosts whose wall clocks step: a standby plane takes the
lease over only once no one renewed it for its TTL, as watched on the standby's own steady
clock, not because its expiry passed on a clock that stepped ahead (a live leader's lease
taken, two planes leading). A dead leader's lease is still taken over in bounded time, the
leader that lost it stops acting, and a start-up that waits before migrating a database past
a dead lease waits once, not twice. The clocks are injected: nothing sleeps for the lengths
stepped."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from helpers import user_and_nodes
from sqlalchemy import text
from test_clock_step_locks import Clock

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.errors import ConfigError
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server import main, plane_lease
from danlu.server.db import Database, Lease, upgrade_database
from danlu.server.plane_lease import LEASE, LEASE_GRACE, LEASE_POLL, LEASE_WAIT_CAP
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, locks

NOW = 1_000_000.0
HOUR = 3_600.0
NODES = (Node("a", 1, gpu_type("H100")),)


def _plane(db: Database, home: Path, steady: Clock) -> Reconciler:
    executor = FakeExecutor(Cluster(NODES), FakeWorld())
    settings = load_settings(home=home)
    return Reconciler(db, executor, settings, policy=make_policy("fifo"), monotonic=steady)


def _lease_token(db: Database) -> str | None:
    with db.read_session() as s:
        lease = s.get(Lease, LEASE)
        return lease.lock_token if lease is not None else None


def test_a_standby_whose_clock_steps_ahead_leaves_a_live_leaders_lease(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        user_and_nodes(s, NODES, NOW)
    leader_steady, standby_steady = Clock(0.0), Clock(500.0)
    leader = _plane(db, tmp_path / "home", leader_steady)
    standby = _plane(db, tmp_path / "home", standby_steady)
    try:
        assert leader.run_once(now=NOW).leader
        # the standby's host clock jumped an hour ahead: every expiry looks long past to it
        for elapsed in range(0, 10 * int(leader.ttl), 2):
            leader_steady.now = float(elapsed)
            standby_steady.now = 500.0 + elapsed
            assert not standby.run_once(now=NOW + HOUR + elapsed).leader, elapsed
            assert leader.run_once(now=NOW + elapsed + 1).leader, elapsed
        assert _lease_token(db) == leader.token
    finally:
        leader.stop()
        standby.stop()


def test_a_standby_takes_over_a_dead_leaders_lease_in_bounded_time(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, NODES, NOW)
    leader_steady, standby_steady = Clock(0.0), Clock(0.0)
    leader = _plane(db, tmp_path / "home", leader_steady)
    standby = _plane(db, tmp_path / "home", standby_steady)
    try:
        assert leader.run_once(now=NOW).leader
        assert not standby.run_once(now=NOW + 1).leader
        # the leader's process hangs (or dies) from here on; the standby keeps watching
        taken_at = None
        for elapsed in range(2, 10 * int(leader.ttl)):
            standby_steady.now = float(elapsed)
            if standby.run_once(now=NOW + elapsed).leader:
                taken_at = elapsed
                break
        assert taken_at is not None
        assert leader.ttl < taken_at <= 1 + leader.ttl + LEASE_GRACE + 1
        assert _lease_token(db) == standby.token
        # the old leader comes back: it finds another token, says so and stops acting
        with db.session() as s:
            body = {"name": "j", "command": ["python", "train.py"], "resources": {"gpus": 1}}
            job_id = jobs.submit(s, body, alice, now=NOW + taken_at).id
        with caplog.at_level(logging.ERROR, logger="danlu.server.reconcile"):
            report = leader.run_once(now=NOW + taken_at + 1)
        assert not report.leader and report.launched == []
        assert "lost the scheduler lease" in caplog.text
        assert standby.run_once(now=NOW + taken_at + 2).launched == [job_id]
    finally:
        leader.stop()
        standby.stop()


def test_a_takeover_does_not_take_a_lease_renewed_since_it_was_watched(db: Database) -> None:
    """The take is a compare-and-set on the row as watched: a holder that renewed it between
    the watch's look and the take keeps it."""
    with db.session() as s:
        assert locks.acquire_lease(s, LEASE, "live", 10.0, NOW, "farhost:77:5")
    with db.session() as s:
        seen = plane_lease.read_holder(s)
    with db.session() as s:  # renewed meanwhile
        assert locks.acquire_lease(s, LEASE, "live", 10.0, NOW + 2, "farhost:77:5")
    with db.session() as s:
        assert not plane_lease.take_over(s, seen, "mine", "here:1:1", 10.0, NOW + HOUR)
    assert _lease_token(db) == "live"


def test_start_up_on_a_clock_stepped_ahead_refuses_a_live_holder(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        assert locks.acquire_lease(s, LEASE, "live", 10.0, NOW, "farhost:77:5")
    clock = Clock(NOW + HOUR)  # this host's clock is an hour ahead of the holder's

    def sleep(seconds: float) -> None:
        clock.now += seconds
        with db.session() as s:  # alive: it renews its lease on its own clock
            assert locks.acquire_lease(s, LEASE, "live", 10.0, clock.now - HOUR, "farhost:77:5")

    with pytest.raises(ConfigError, match="keeps renewing"):
        plane_lease.take_scheduler_lease(
            db, load_settings(home=tmp_path / "home"), clock=clock, sleep=sleep
        )
    assert _lease_token(db) == "live"


def test_start_up_takes_a_lapsed_lease_once_it_stayed_unrenewed_for_its_ttl(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        assert locks.acquire_lease(s, LEASE, "gone", 10.0, NOW - 100, "farhost:77:5")
    clock = Clock(NOW)

    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    settings = load_settings(home=tmp_path / "home")
    token = plane_lease.take_scheduler_lease(db, settings, clock=clock, sleep=sleep)
    ttl = plane_lease.scheduler_lease_ttl(settings)
    assert ttl + LEASE_GRACE <= clock.now - NOW <= ttl + LEASE_GRACE + 1
    # a read of the store a poll's interval, also past the renewal deadline (it polled
    # every 10 ms there: a thousand reads over the lease's TTL)
    assert len(slept) <= (ttl + LEASE_GRACE) / LEASE_POLL + 2, len(slept)
    assert _lease_token(db) == token


def _at_0027(tmp_path: Path, expires: float) -> str:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade_database(url, "0027")
    old = Database(url)
    try:
        with old.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO leases (id, lock_token, lock_expires_at, lock_owner) "
                    "VALUES (:id, 'old', :expires, 'farhost:77:5')"
                ),
                {"id": LEASE, "expires": expires},
            )
    finally:
        old.dispose()
    return url


def test_an_upgrade_on_a_clock_stepped_ahead_refuses_a_live_older_plane(
    tmp_path: Path,
) -> None:
    url = _at_0027(tmp_path, NOW + 10)
    clock = Clock(NOW + HOUR)

    def sleep(seconds: float) -> None:
        clock.now += seconds
        old = Database(url)
        try:
            with old.engine.begin() as conn:  # the older plane renews on its own clock
                conn.execute(
                    text("UPDATE leases SET lock_expires_at = :e"), {"e": clock.now - HOUR + 10}
                )
        finally:
            old.dispose()

    with pytest.raises(ConfigError, match="keeps renewing"):
        plane_lease.wait_before_upgrading(url, clock=clock, sleep=sleep)


def test_start_up_past_a_dead_far_ahead_lease_waits_once_before_and_after_the_upgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _at_0027(tmp_path, NOW + HOUR + 10)  # written before this host's clock went back
    clock = Clock(NOW)

    def sleep(seconds: float) -> None:
        clock.now += max(seconds, 30.0)

    def wait_before_upgrading(db_url: str, **kwargs: Any) -> None:
        plane_lease.wait_before_upgrading(db_url, clock=clock, sleep=sleep, **kwargs)

    def take_scheduler_lease(db: Database, settings: Any, **kwargs: Any) -> str:
        return plane_lease.take_scheduler_lease(db, settings, clock=clock, sleep=sleep, **kwargs)

    monkeypatch.setattr(main, "wait_before_upgrading", wait_before_upgrading)
    monkeypatch.setattr(main, "take_scheduler_lease", take_scheduler_lease)
    settings = load_settings(home=tmp_path / "home", database_url=url)
    store = main._open_store(settings, take_lease=True)
    assert store.lease is not None
    waited = clock.now - NOW
    assert LEASE_WAIT_CAP <= waited < 2 * LEASE_WAIT_CAP  # the old code waited it twice
    with Database(url).session() as s:
        lease = s.get(Lease, LEASE)
        assert lease is not None and lease.lock_token == store.lease


def test_a_start_up_that_fails_after_taking_the_lease_gives_it_back(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any) -> str | None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(plane_lease, "foreign_runs", broken)
    with pytest.raises(RuntimeError, match="went away"):
        plane_lease.take_scheduler_lease(db, load_settings(home=tmp_path / "home"))
    with db.read_session() as s:
        lease = s.get(Lease, LEASE)
        assert lease is not None and lease.lock_token is None


def test_a_pass_that_lost_its_lease_in_its_poll_cancels_nothing(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll that outlived the lease (another plane took it over meanwhile) ends the pass:
    its rules (deadlines, dependencies, sweeps) are the new holder's to apply."""
    with db.session() as s:
        alice = user_and_nodes(s, NODES, NOW)
    loop = _plane(db, tmp_path / "home", Clock(0.0))
    try:
        assert loop.run_once(now=NOW).leader
        with db.session() as s:
            body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
            job_id = jobs.submit(s, {"name": "j", "deadline": 50, **body}, alice, now=NOW).id
        real_poll = loop._poll

        def slow_poll(*args: Any, **kwargs: Any) -> Any:
            out = real_poll(*args, **kwargs)
            with db.session() as s:  # the poll hung past the TTL: another plane took over
                assert locks.claim(s, Lease, [LEASE], "other", 60.0, NOW + HOUR, "far:7:1")
            return out

        monkeypatch.setattr(loop, "_poll", slow_poll)
        report = loop.run_once(now=NOW + 60)
        assert report.expired == [] and report.started == []
        with db.read_session() as s:
            assert jobs.get_job(s, job_id).state == "PENDING"
    finally:
        loop.stop()


def test_a_take_whose_check_fails_gives_the_lease_back_and_checks_again(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop that took the lease and then failed to check the database's running jobs
    (:func:`~danlu.server.plane_lease.foreign_runs`: a database error) held it unchecked:
    its next pass renewed it and acted without the check. It gives it back instead."""
    from danlu.server import reconcile

    loop = _plane(db, tmp_path / "home", Clock(0.0))
    calls: list[str] = []

    def broken(*_args: Any) -> str | None:
        calls.append("checked")
        raise RuntimeError("the database went away")

    monkeypatch.setattr(reconcile, "foreign_runs", broken)
    try:
        with pytest.raises(RuntimeError, match="went away"):
            loop.run_once(now=NOW)
        assert _lease_token(db) is None
        with pytest.raises(RuntimeError, match="went away"):
            loop.run_once(now=NOW + 1)  # checked again, not renewed unchecked
        assert calls == ["checked", "checked"]
    finally:
        monkeypatch.undo()
        loop.stop()
