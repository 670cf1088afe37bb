"""A wall clock set back (an NTP step after the host's clock ran ahead, an admin's
correction) does not hold up the loops' periodic steps for as long as the clock jumped: the
retention's passes, the executor's nodes read again (and an outage's log line), the
webhook sender's clean-up run as they would have (:func:`~danlu.server.loops.clock_due`)."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from helpers import user_and_nodes

from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import ExecutorUnavailableError, FakeExecutor, FakeWorld
from danlu.server.db import Database
from danlu.server.inventory import InventoryRefresh
from danlu.server.loops import clock_due
from danlu.server.purge import Purger
from danlu.server.services import jobs, retention, users, webhooks
from danlu.server.webhook_sender import WebhookSender

NOW = 1_000_000.0
DAY = 86_400.0
AHEAD = 365 * DAY
"""How far ahead the host's clock ran before it was set right."""
NODE = Node("a", 2, gpu_type("H100"))


def test_a_step_is_due_when_its_time_comes_or_the_clock_went_back_past_its_wait() -> None:
    assert not clock_due(at=100.0, now=99.0, wait=10.0)
    assert clock_due(at=100.0, now=100.0, wait=10.0)
    assert not clock_due(at=100.0, now=90.0, wait=10.0)  # as far ahead as it waits: not yet
    assert clock_due(at=100.0, now=89.0, wait=10.0)  # further: the clock went back
    assert clock_due(at=float("-inf"), now=0.0, wait=10.0)


def test_the_retention_goes_on_after_the_clock_is_set_back(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
        alice = users.get_user(s, "alice")
        body = {"name": "j", "command": ["python", "train.py"], "resources": {"gpus": 1}}
        job_id = jobs.submit(s, body, alice, now=NOW).id
    executor = FakeExecutor(Cluster((NODE,)), FakeWorld())
    purger = Purger(db, executor, tmp_path / "checkpoints", days=0.5)
    assert purger.run(NOW + AHEAD) == ([], [])  # the clock a year ahead: nothing finished
    with db.session() as s:  # the clock set right; the job ends
        jobs.cancel_job(s, job_id, now=NOW + 1)
    purged, errors = purger.run(NOW + DAY)
    assert (purged, errors) == ([job_id], [])
    with db.read_session() as s:
        assert jobs.get_job(s, job_id).purged_at == NOW + DAY
    assert purger.run(NOW + DAY + 1) == ([], [])  # then every retention.EVERY again
    assert not clock_due(NOW + DAY + retention.EVERY, NOW + DAY + 1, retention.EVERY)


def test_the_nodes_are_read_again_after_the_clock_is_set_back(db: Database) -> None:
    before = Cluster((Node("a", 2, gpu_type("H100")),))
    with db.session() as s:
        user_and_nodes(s, before.nodes, NOW)
    world = FakeWorld()
    refresh = InventoryRefresh(db, FakeExecutor(before, world), every=30.0)
    assert refresh.run(NOW + AHEAD) is None  # the first call starts the clock
    assert refresh.run(NOW + AHEAD + 30) is None  # read: nothing changed
    world.cluster = Cluster((*before.nodes, Node("b", 4, gpu_type("H100"))))
    change = refresh.run(NOW)  # the clock set right: a year before the last reading
    assert change is not None and change.added == ("b",)
    assert refresh.run(NOW + 10) is None  # read at NOW: the next reading 30 s later
    world.cluster = before
    assert refresh.run(NOW + 20) is None
    change = refresh.run(NOW + 30)
    assert change is not None and change.removed == ("b",)


def test_old_deliveries_are_deleted_after_the_clock_is_set_back(sqlite_db: Database) -> None:
    sender = WebhookSender(
        sqlite_db, transport=httpx.MockTransport(lambda request: httpx.Response(200))
    )
    try:
        assert sender.run_once(now=NOW + AHEAD) == 0  # the clock a year ahead
        with sqlite_db.session() as s:  # the clock set right
            hook_id = webhooks.create(s, "http://hooks.example/x", "admin", now=NOW).id
            webhooks.ping(s, hook_id, now=NOW)
        assert sender.run_once(now=NOW) == 1
        with sqlite_db.read_session() as s:
            assert [d.done_at for d in webhooks.deliveries(s, hook_id)] == [NOW]
        later = NOW + webhooks.KEEP_DONE_SECONDS + DAY
        assert sender.run_once(now=later) == 0
        with sqlite_db.read_session() as s:
            assert webhooks.deliveries(s, hook_id) == []
    finally:
        sender.stop()


class _Down(FakeExecutor):
    """A fake executor whose backend cannot be asked."""

    def refresh_inventory(self) -> Cluster:
        raise ExecutorUnavailableError("cannot read Ray's nodes: is the Ray head up?")


def test_an_outage_is_still_logged_a_minute_apart_after_the_clock_is_set_back(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = Cluster((NODE,))
    with db.session() as s:
        user_and_nodes(s, cluster.nodes, NOW)
    refresh = InventoryRefresh(db, _Down(cluster, FakeWorld()), every=5.0)
    caplog.set_level(logging.WARNING, logger="danlu.server.inventory")
    refresh.run(NOW + AHEAD)  # starts the clock
    assert refresh.run(NOW + AHEAD + 5) is None  # the outage's first line
    assert len(caplog.records) == 1
    for t in (NOW, NOW + 5, NOW + 60):  # the clock set right: read at once, then 5 s apart
        assert refresh.run(t) is None
    again = [r.getMessage() for r in caplog.records[1:]]
    assert again == [
        "cannot read the executor's nodes, 1 more times: cannot read Ray's nodes: is the Ray "
        "head up?",
        "cannot read the executor's nodes, 2 more times: cannot read Ray's nodes: is the Ray "
        "head up?",
    ]
