"""Webhooks under concurrency: a webhook removed while a job's state change is
being written (after the change read the webhooks, before it inserted their deliveries)
no longer fails that change on the deliveries' foreign key (PostgreSQL); a ping of a webhook
removed meanwhile is a 404, not an IntegrityError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from helpers import user_and_nodes
from interleave import Interleave, Outcome
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database
from danlu.server.db.models import WebhookDelivery
from danlu.server.errors import NotFoundError
from danlu.server.services import jobs, webhooks

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))
BODY = {"name": "j", "command": ["python", "t.py"], "resources": {"gpus": 1}}


def test_a_webhook_removed_during_a_state_change_leaves_the_change_to_commit(
    db: Database,
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        job_id = jobs.submit(s, BODY, alice, now=NOW).id
        kept = webhooks.create(s, "http://hooks.example.invalid/a", "root", states=["CANCELLED"])
        gone = webhooks.create(s, "http://hooks.example.invalid/b", "root", states=["CANCELLED"])
        kept_seq, gone_id = kept.seq, gone.id
    out = _removed_meanwhile(
        db,
        lambda s: jobs.cancel_job(s, job_id, reason="stop", now=NOW + 1).state,
        gone_id,
    )
    assert out.second_error is None
    assert out.first_error is None, out.first_error  # was an IntegrityError (foreign key)
    assert out.first == "CANCELLED"
    with db.read_session() as s:
        assert jobs.get_job(s, job_id).state == "CANCELLED"
        hooks = list(s.scalars(select(WebhookDelivery.webhook_seq)))
    assert hooks == [kept_seq]  # the remaining webhook is still told


def _removed_meanwhile(db: Database, first: Callable[[Session], Any], hook_id: str) -> Outcome:
    """Run ``first``, paused (PostgreSQL) once it has read the webhooks, while webhook
    ``hook_id`` is removed and committed."""
    race = Interleave(db)

    def paused_after_reading_the_webhooks(*args: Any) -> None:
        statement = str(args[2])
        if "FROM webhooks" in statement and "FOR KEY SHARE" not in statement:
            race.pause()

    event.listen(db.engine, "after_cursor_execute", paused_after_reading_the_webhooks)
    try:
        return race.run(first, lambda s: webhooks.remove(s, hook_id))
    finally:
        event.remove(db.engine, "after_cursor_execute", paused_after_reading_the_webhooks)


def test_a_ping_of_a_webhook_removed_meanwhile_is_not_found(db: Database) -> None:
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
        hook_id = webhooks.create(s, "http://hooks.example.invalid/a", "root").id
    out = _removed_meanwhile(db, lambda s: webhooks.ping(s, hook_id, now=NOW).id, hook_id)
    assert out.second_error is None
    if db.dialect == "postgresql":  # was an IntegrityError (foreign key): a 500
        assert isinstance(out.first_error, NotFoundError), out.first_error
    else:  # serialised: the ping came first, and went with its webhook
        assert out.first_error is None
    with db.read_session() as s:
        assert list(s.scalars(select(WebhookDelivery.id))) == []
