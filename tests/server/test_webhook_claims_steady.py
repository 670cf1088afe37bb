"""A webhook claim is judged on the claimer's steady clock, as the ``scheduler`` lease is
(:class:`~danlu.server.plane_lease.LeaseWatch`): a plane whose wall clock stepped an hour
ahead took a delivery another plane had claimed and was posting (its lock looked expired),
and the endpoint got it twice; one whose clock stepped back took one at once (its lock
looked further ahead than any is taken for). A claim is never renewed, and its post ends
within the lock's TTL, so a claim another plane holds is taken over only once this plane
has found it unchanged for that TTL on a clock that no one sets: a dead sender's claims are
still posted again, whatever the wall clocks said meanwhile."""

from __future__ import annotations

import httpx
import pytest

from danlu.server.db import Database
from danlu.server.services import webhooks
from danlu.server.webhook_sender import WebhookSender

NOW = 1_000_000.0
HOUR = 3_600.0
TTL = 50.0


class Clock:
    """A steady clock the test moves."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _claimed_by_another_plane(db: Database) -> tuple[str, int]:
    """A webhook and its delivery, claimed at NOW by a live plane posting it."""
    with db.session() as s:
        hook = webhooks.create(s, "http://hooks.example/x", "admin", now=NOW).id
        delivery_id = webhooks.ping(s, hook, now=NOW).id
    with db.session() as s:
        assert webhooks.claim_due(s, "live", TTL, NOW, 1) == [delivery_id]
    return hook, delivery_id


@pytest.mark.parametrize("step", [HOUR, -HOUR], ids=["ahead", "back"])
def test_a_plane_whose_clock_stepped_does_not_take_a_live_claim(db: Database, step: float) -> None:
    _claimed_by_another_plane(db)
    steady = Clock()
    watch = webhooks.ClaimWatch(steady)
    for seconds in (0.0, 5.0, TTL - 1):  # passes within the live post's lock
        steady.now = seconds
        t = NOW + step + seconds
        with db.read_session() as s:
            assert not webhooks.any_due(s, t, TTL, watch=watch)
        with db.session() as s:
            assert webhooks.claim_due(s, "stepped", TTL, t, 1, watch=watch) == []


def test_a_dead_senders_claim_is_taken_once_unchanged_for_its_ttl(db: Database) -> None:
    _, delivery_id = _claimed_by_another_plane(db)
    steady = Clock()
    watch = webhooks.ClaimWatch(steady)
    with db.session() as s:  # its expiry long past: found, not taken yet
        assert webhooks.claim_due(s, "mine", TTL, NOW + HOUR, 1, watch=watch) == []
    steady.now = TTL
    with db.read_session() as s:
        assert webhooks.any_due(s, NOW + HOUR + TTL, TTL, watch=watch)
    with db.session() as s:  # unchanged for its TTL: its sender is gone
        assert webhooks.claim_due(s, "mine", TTL, NOW + HOUR + TTL, 1, watch=watch) == [delivery_id]


def test_a_claim_made_anew_meanwhile_is_watched_anew(db: Database) -> None:
    _, delivery_id = _claimed_by_another_plane(db)
    steady = Clock()
    watch = webhooks.ClaimWatch(steady)
    with db.session() as s:
        assert webhooks.claim_due(s, "mine", TTL, NOW + HOUR, 1, watch=watch) == []
    with db.session() as s:  # the live plane's post failed; it claims it again later
        assert webhooks.record(s, delivery_id, "live", NOW + 1, status_code=500, error=None)
        s.commit()
    with db.session() as s:
        retry_at = NOW + 1 + webhooks.backoff(1)
        assert webhooks.claim_due(s, "live-2", TTL, retry_at, 1) == [delivery_id]
    steady.now = TTL  # as long since the first look, not since the new claim
    with db.session() as s:
        assert webhooks.claim_due(s, "mine", TTL, NOW + HOUR + TTL, 1, watch=watch) == []
    steady.now = 2 * TTL
    with db.session() as s:
        assert webhooks.claim_due(s, "mine", TTL, NOW + HOUR + 2 * TTL, 1, watch=watch) == [
            delivery_id
        ]


def test_a_sender_whose_clock_stepped_ahead_does_not_post_a_live_claim_again(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sender as it runs: its process's watch (the default) on the steady clock."""
    posted: list[str] = []
    steady = Clock()
    monkeypatch.setattr(webhooks, "steady_clock", steady, raising=False)  # old code: none

    def answer(request: httpx.Request) -> httpx.Response:
        posted.append(request.headers["X-Danlu-Delivery"])
        return httpx.Response(200)

    _, delivery_id = _claimed_by_another_plane(db)
    sender = WebhookSender(db, transport=httpx.MockTransport(answer))
    assert sender.ttl == TTL
    try:
        assert sender.run_once(now=NOW + HOUR) == 0  # the old code posted it
        steady.now = TTL  # its sender died: found unchanged for its TTL
        assert sender.run_once(now=NOW + HOUR + TTL) == 1
    finally:
        sender.stop()
    assert posted == [str(delivery_id)]
