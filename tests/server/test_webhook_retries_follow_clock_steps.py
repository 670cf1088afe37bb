"""A step of the wall clock (an NTP step, ``date -s``) moves the webhook deliveries' pending
retries with it, as it moves the jobs' backoffs: a clock set back an hour does not hold a
retry back an hour more, one stepped ahead does not send every retry at once. A delivery
made after the step is due when it was made."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.db.models import WebhookDelivery
from danlu.server.reconcile import Reconciler
from danlu.server.services import webhooks

NOW = 1_000_000.0
HOUR = 3_600.0
NODES = (Node("a", 1, gpu_type("H100")),)


class Monotonic:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _retry_at(db: Database, delivery_id: int) -> float:
    with db.read_session() as s:
        delivery = s.get(WebhookDelivery, delivery_id)
        assert delivery is not None
        return delivery.next_attempt_at


@pytest.mark.parametrize("step", [-HOUR, HOUR], ids=["set back", "stepped ahead"])
def test_a_clock_step_moves_pending_retries_with_it(
    db: Database, tmp_path: Path, step: float
) -> None:
    with db.session() as s:
        user_and_nodes(s, NODES, NOW)
        hook = webhooks.create(s, "http://127.0.0.1:9/hook", "admin", now=NOW).id
        waiting = webhooks.ping(s, hook, now=NOW - 60)  # failed once: retried at NOW + 600
        waiting.attempts, waiting.next_attempt_at = 1, NOW + 600
        given_up = webhooks.ping(s, hook, now=NOW - 60)
        given_up.attempts, given_up.done_at, given_up.next_attempt_at = 12, NOW - 10, NOW + 600
        waiting_id, given_up_id = waiting.id, given_up.id
    executor = FakeExecutor(Cluster(NODES), FakeWorld())
    mono = Monotonic()
    loop = Reconciler(
        db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"), monotonic=mono
    )
    try:
        loop.run_once(now=NOW)
        with db.session() as s:  # made after the step, on the clock as it is now
            fresh = webhooks.ping(s, hook, now=NOW + step + 5).id
        mono.now = 10.0
        loop.run_once(now=NOW + step + 10)
        assert _retry_at(db, waiting_id) == pytest.approx(NOW + step + 600)
        assert _retry_at(db, given_up_id) == NOW + 600  # done: nothing to move
        assert _retry_at(db, fresh) == NOW + step + 5  # due when it was made
        mono.now = 20.0  # no step since: nothing moves
        loop.run_once(now=NOW + step + 20)
        assert _retry_at(db, waiting_id) == pytest.approx(NOW + step + 600)
    finally:
        loop.stop()
