"""Row locks, webhook claims and the ``scheduler`` lease expire on the wall clock, so a step
of it (an NTP step, ``date -s``) moves every expiry at once: a step ahead must not let a
webhook sender post a delivery it is posting a second time, a step back must not hold a dead
sender's claims, or a dead plane's lease, the step's length longer, and a retry the sender
scheduled on the new clock must not be moved again by the reconcile loop's shift. The clocks
are injected: nothing sleeps for the lengths stepped."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from helpers import user_and_nodes
from sqlalchemy import text

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.errors import ConfigError
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database, Job, Lease, upgrade_database
from danlu.server.db.models import WebhookDelivery
from danlu.server.plane_lease import (
    LEASE,
    LEASE_WAIT_CAP,
    take_scheduler_lease,
    wait_before_upgrading,
)
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, locks, webhooks
from danlu.server.webhook_sender import WebhookSender

NOW = 1_000_000.0
HOUR = 3_600.0
NODES = (Node("a", 1, gpu_type("H100")),)


class Clock:
    """A clock the test moves (wall or monotonic)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_sender_whose_clock_steps_ahead_mid_post_does_not_post_again(db: Database) -> None:
    posted: list[str] = []
    first_in = threading.Event()
    let_go = threading.Event()

    def answer(request: httpx.Request) -> httpx.Response:
        posted.append(request.headers["X-Danlu-Delivery"])
        if len(posted) == 1:
            first_in.set()
            let_go.wait(10)
        return httpx.Response(200)

    with db.session() as s:
        hook = webhooks.create(s, "http://hooks.example/x", "admin", now=NOW).id
        delivery_id = webhooks.ping(s, hook, now=NOW).id
    clock = Clock(NOW)
    sender = WebhookSender(db, interval=0.05, transport=httpx.MockTransport(answer), clock=clock)
    claimed_after_step = threading.Event()
    real_post_due = sender._post_due

    def post_due(t: float, *args: object, **kwargs: object) -> int:
        started = real_post_due(t, *args, **kwargs)  # type: ignore[arg-type]
        if t >= NOW + HOUR:
            claimed_after_step.set()
        return started

    sender._post_due = post_due  # type: ignore[method-assign]
    passed: list[int] = []
    worker = threading.Thread(target=lambda: passed.append(sender.run_once()))
    try:
        worker.start()
        assert first_in.wait(10)
        clock.now = NOW + HOUR  # the sender's wall clock steps an hour ahead mid-post
        sender.wake()
        assert claimed_after_step.wait(10)  # the pass looked for due deliveries since
        let_go.set()
        worker.join(10)
        assert passed == [1]
        assert posted == [str(delivery_id)]  # the old code posted it a second time
        with db.read_session() as s:
            [delivery] = webhooks.deliveries(s, hook)
            assert delivery.delivered and delivery.attempts == 1
    finally:
        let_go.set()
        sender.stop()


def test_a_dead_senders_claim_from_before_a_step_back_is_claimed_again(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once found unchanged for its TTL on the sender's steady clock
    (:class:`~danlu.server.services.webhooks.ClaimWatch`), not an hour later."""
    with db.session() as s:
        hook = webhooks.create(s, "http://hooks.example/x", "admin", now=NOW - 2 * HOUR).id
        delivery_id = webhooks.ping(s, hook, now=NOW - 2 * HOUR).id
    steady = Clock(0.0)
    monkeypatch.setattr(webhooks, "steady_clock", steady)
    sender = WebhookSender(db, transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    try:
        with db.session() as s:  # a sender claimed it, then died; the clock went back an hour
            assert webhooks.claim_due(s, "dead", sender.ttl, NOW, 1) == [delivery_id]
        assert sender.run_once(now=NOW - HOUR + 5) == 0  # found: it may be a live post
        steady.now = sender.ttl
        assert sender.run_once(now=NOW - HOUR + 5 + sender.ttl) == 1  # not an hour later
        with db.read_session() as s:
            [delivery] = webhooks.deliveries(s, hook)
            assert delivery.delivered
    finally:
        sender.stop()


def test_a_claim_a_host_whose_clock_runs_a_little_ahead_made_still_holds(db: Database) -> None:
    with db.session() as s:
        hook = webhooks.create(s, "http://hooks.example/x", "admin", now=NOW).id
        webhooks.ping(s, hook, now=NOW)
    ttl = 50.0
    with db.session() as s:  # another sender, its clock 30 s ahead, posts it
        assert webhooks.claim_due(s, "live", ttl, NOW + 30, 1)
    with db.session() as s:
        assert not webhooks.any_due(s, NOW, ttl)
        assert webhooks.claim_due(s, "mine", ttl, NOW, 1) == []


def test_a_retry_scheduled_after_a_step_ahead_is_not_moved_by_it_again(
    db: Database, tmp_path: Path
) -> None:
    """The sender (its own thread) wrote a failed post's outcome after the clock stepped an
    hour ahead, before the reconcile loop found the step: its backoff was counted on the new
    clock already."""
    with db.session() as s:
        user_and_nodes(s, NODES, NOW)
        hook = webhooks.create(s, "http://127.0.0.1:9/hook", "admin", now=NOW).id
        before_step = webhooks.ping(s, hook, now=NOW - 60).id
        after_step = webhooks.ping(s, hook, now=NOW - 50).id
    with db.session() as s:  # failed at NOW - 5: retried 10 s later, on the old clock
        assert webhooks.claim_due(s, "a", 50.0, NOW - 5, 1) == [before_step]
        assert webhooks.record(s, before_step, "a", NOW - 5, status_code=500, error=None)
        s.commit()
    executor = FakeExecutor(Cluster(NODES), FakeWorld())
    mono = Clock(0.0)
    loop = Reconciler(
        db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"), monotonic=mono
    )
    try:
        loop.run_once(now=NOW)
        with db.session() as s:  # the step, then a post of the other one fails at once
            s.execute(
                WebhookDelivery.__table__.update()
                .where(WebhookDelivery.id == after_step)
                .values(lock_token="b", lock_expires_at=NOW + HOUR + 50)
            )
            assert webhooks.record(s, after_step, "b", NOW + HOUR + 3, status_code=500, error=None)
            s.commit()
        mono.now = 5.0
        loop.run_once(now=NOW + HOUR + 5)  # the loop finds the step now
        with db.read_session() as s:
            moved = s.get(WebhookDelivery, before_step)
            kept = s.get(WebhookDelivery, after_step)
            assert moved is not None and kept is not None
            assert moved.next_attempt_at == pytest.approx(NOW + 5 + HOUR)
            assert kept.next_attempt_at == pytest.approx(NOW + HOUR + 3 + webhooks.backoff(1))
    finally:
        loop.stop()


def _dead_planes_lease(db: Database, expires_in: float) -> str:
    """The lease as a plane on another host left it, its expiry ``expires_in`` seconds past
    ``NOW``, and a job it had locked (its id)."""
    with db.session() as s:
        alice = user_and_nodes(s, NODES, NOW)
        assert locks.acquire_lease(s, LEASE, "gone", expires_in, NOW, "farhost:77:5")
    with db.session() as s:
        body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
        job_id = jobs.submit(s, {"name": "j", **body}, alice, now=NOW).id
    with db.session() as s:
        assert locks.claim(s, Job, [job_id], "gone", expires_in, NOW, "farhost:77:5")
    return job_id


def test_start_up_takes_over_a_dead_planes_lease_a_step_back_made_long(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _dead_planes_lease(db, HOUR + 10)  # written before this host's clock went back an hour
    clock = Clock(NOW)

    def sleep(seconds: float) -> None:
        clock.now += max(seconds, 30.0)

    with caplog.at_level("WARNING", logger="danlu.server.plane_lease"):
        token = take_scheduler_lease(
            db, load_settings(home=tmp_path / "home"), clock=clock, sleep=sleep
        )
    assert clock.now < NOW + LEASE_WAIT_CAP + 60  # not an hour (the old code refused)
    assert "no one renewed the scheduler lease" in caplog.text and "farhost" in caplog.text
    with db.read_session() as s:
        lease = s.get(Lease, LEASE)
        assert lease is not None and lease.lock_token == token
        [job] = s.query(Job).all()
        assert job.lock_token is None  # the dead plane's job locks went with its lease


def test_start_up_still_refuses_a_far_ahead_holder_that_renews(
    db: Database, tmp_path: Path
) -> None:
    _dead_planes_lease(db, HOUR + 10)
    clock = Clock(NOW)

    def sleep(seconds: float) -> None:
        clock.now += max(seconds, 30.0)
        with db.session() as s:  # alive, on a host whose clock runs an hour ahead
            assert locks.acquire_lease(s, LEASE, "gone", 10, clock.now + HOUR, "farhost:77:5")

    with pytest.raises(ConfigError, match="keeps renewing"):
        take_scheduler_lease(db, load_settings(home=tmp_path / "home"), clock=clock, sleep=sleep)


def test_an_upgrade_goes_on_past_a_dead_older_planes_lease_a_step_back_made_long(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade_database(url, "0027")  # a database an older danlu's plane used, then died on
    old = Database(url)
    try:
        with old.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO leases (id, lock_token, lock_expires_at, lock_owner) "
                    "VALUES (:id, 'old', :expires, 'farhost:77:5')"
                ),
                {"id": LEASE, "expires": NOW + HOUR + 10},
            )
    finally:
        old.dispose()
    clock = Clock(NOW)

    def sleep(seconds: float) -> None:
        clock.now += max(seconds, 30.0)

    wait_before_upgrading(url, clock=clock, sleep=sleep)  # the old code refused it
    assert clock.now < NOW + LEASE_WAIT_CAP + 60


def _standby(db: Database, tmp_path: Path, mono: Clock) -> Reconciler:
    executor = FakeExecutor(Cluster(NODES), FakeWorld())
    settings = load_settings(home=tmp_path / "home")
    return Reconciler(db, executor, settings, policy=make_policy("fifo"), monotonic=mono)


def test_a_running_plane_takes_over_a_dead_planes_lease_a_step_back_made_long(
    db: Database, tmp_path: Path
) -> None:
    job_id = _dead_planes_lease(db, HOUR + 10)
    mono = Clock(0.0)
    loop = _standby(db, tmp_path, mono)
    try:
        assert not loop.run_once(now=NOW).leader
        mono.now = LEASE_WAIT_CAP / 2
        assert not loop.run_once(now=NOW + LEASE_WAIT_CAP / 2).leader
        mono.now = LEASE_WAIT_CAP
        report = loop.run_once(now=NOW + LEASE_WAIT_CAP)  # the old code waited the hour
        assert report.leader and report.launched == [job_id]  # its job lock went too
    finally:
        loop.stop()


def test_a_running_plane_leaves_a_far_ahead_lease_that_is_renewed_alone(
    db: Database, tmp_path: Path
) -> None:
    _dead_planes_lease(db, HOUR + 10)
    mono = Clock(0.0)
    loop = _standby(db, tmp_path, mono)
    try:
        for seconds in (0.0, LEASE_WAIT_CAP / 2, LEASE_WAIT_CAP, 2 * LEASE_WAIT_CAP):
            with db.session() as s:  # alive, on a host whose clock runs an hour ahead
                assert locks.acquire_lease(
                    s, LEASE, "gone", 10, NOW + seconds + HOUR, "farhost:77:5"
                )
            mono.now = seconds
            assert not loop.run_once(now=NOW + seconds).leader
    finally:
        loop.stop()


def test_a_running_plane_of_a_long_interval_waits_twice_its_lease_before_taking_over(
    db: Database, tmp_path: Path
) -> None:
    """Planes sharing a database share their settings: with ``DANLU_INTERVAL=300`` a live
    holder renews every 300 s and its lease lasts 1500 s, so a row unchanged for 600 s is no
    sign of a dead holder; the watcher waits twice the lease (3000 s) instead."""
    _dead_planes_lease(db, HOUR + 10)
    mono = Clock(0.0)
    executor = FakeExecutor(Cluster(NODES), FakeWorld())
    settings = load_settings(home=tmp_path / "home", interval=300.0)
    loop = Reconciler(db, executor, settings, policy=make_policy("fifo"), monotonic=mono)
    try:
        assert loop.lease_watch.patience == 3000.0
        for seconds in (0.0, LEASE_WAIT_CAP, 2 * LEASE_WAIT_CAP, 2999.0):
            mono.now = seconds
            assert not loop.run_once(now=NOW + seconds).leader
        mono.now = 3000.0
        assert loop.run_once(now=NOW + 3000.0).leader
    finally:
        loop.stop()


def test_a_leading_plane_says_which_jobs_have_times_ahead_of_its_clock(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The clock was set back an hour while no plane ran: the step is unseen, but the jobs
    recorded before it lie an hour ahead. Said once, nothing rewritten."""
    with db.session() as s:
        alice = user_and_nodes(s, NODES, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
        ahead = jobs.submit(s, {"name": "ahead", **body}, alice, now=NOW + HOUR).id
        jobs.submit(s, {"name": "now", **body}, alice, now=NOW)
    mono = Clock(0.0)
    loop = _standby(db, tmp_path, mono)
    try:
        with caplog.at_level("WARNING", logger="danlu.server.upkeep"):
            assert loop.run_once(now=NOW).leader
            mono.now = 5.0
            loop.run_once(now=NOW + 5)
        said = [m for r in caplog.records if "after this host's clock" in (m := r.getMessage())]
        assert len(said) == 1, said
        assert f"up to 3600 s after this host's clock: 1 ({ahead})." in said[0], said
        with db.read_session() as s:
            assert jobs.get_job(s, ahead).submitted_at == NOW + HOUR
    finally:
        loop.stop()
