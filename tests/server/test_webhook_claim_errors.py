"""A webhook pass that fails between claiming deliveries and posting them (the store fails to
read their messages) gives the claims back: the deliveries are posted by the next pass, not
left locked until their lock expires (``2 x timeout + 30`` s)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError

from danlu.server.db import Database
from danlu.server.services import webhooks
from danlu.server.webhook_sender import WebhookSender

NOW = 1_000_000.0


def test_deliveries_claimed_by_a_pass_that_failed_before_posting_are_posted_next(
    sqlite_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    posted: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        posted.append(request.headers["X-Danlu-Delivery"])
        return httpx.Response(200)

    with sqlite_db.session() as s:
        hook_id = webhooks.create(s, "http://hooks.example/x", "admin", now=NOW).id
        delivery_id = webhooks.ping(s, hook_id, now=NOW).id
    real = webhooks.outgoing
    failing = [True]

    def outgoing(*args: Any, **kwargs: Any) -> list[webhooks.Outgoing]:
        if failing.pop() if failing else False:
            raise OperationalError("SELECT", {}, Exception("database is locked"))
        return real(*args, **kwargs)

    monkeypatch.setattr(webhooks, "outgoing", outgoing)
    sender = WebhookSender(sqlite_db, transport=httpx.MockTransport(answer))
    try:
        with pytest.raises(OperationalError):
            sender.run_once(now=NOW + 1)  # nothing under way: the loop logs it
        with sqlite_db.read_session() as s:
            [delivery] = webhooks.deliveries(s, hook_id)
            assert (delivery.lock_token, delivery.attempts) == (None, 0)
        assert sender.run_once(now=NOW + 2) == 1  # the next pass, not 50 s later
        assert posted == [str(delivery_id)]
    finally:
        sender.stop()
