"""A webhook is named by a unique prefix of 4+ characters of its id, as a job and a sweep are
(``danlu webhook ping c0d8`` was ``webhook 'c0d8' not found``); an ambiguous prefix is a 409
naming the webhooks it matched, and a prefix of fewer than 4 characters names none."""

from __future__ import annotations

import pytest
import test_webhook_names
from fastapi.testclient import TestClient
from helpers import user_and_nodes

from conftest import NOW
from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database
from danlu.server.errors import ConflictError, NotFoundError
from danlu.server.routes import deps
from danlu.server.services import jobs, webhooks

URL = "http://hooks.example/danlu"


def _hooks(db: Database, *ids: str) -> None:
    """Add a webhook with each of ``ids`` (its id set, so that prefixes are known)."""
    with db.session() as s:
        for hook_id in ids:
            webhooks.create(s, URL, "root", now=NOW).id = hook_id


def test_a_webhook_is_found_by_a_unique_prefix_of_its_id(db: Database) -> None:
    _hooks(db, "c0d811111111", "c0de22222222", "c0de33333333")
    with db.session() as s:
        assert webhooks.get(s, "c0d8").id == "c0d811111111"
        assert webhooks.get(s, "c0de2").id == "c0de22222222"
        assert webhooks.ping(s, "c0d81", now=NOW).webhook_seq == webhooks.get(s, "c0d8").seq
        assert [d.kind for d in webhooks.deliveries(s, "c0d8111")] == ["ping"]
        with pytest.raises(ConflictError) as ambiguous:
            webhooks.get(s, "c0de")
        assert str(ambiguous.value) == (
            "webhook id prefix 'c0de' is ambiguous (c0de22222222, c0de33333333); "
            "give more characters"
        )
        with pytest.raises(NotFoundError, match="4 characters or more"):
            webhooks.get(s, "c0d")
        webhooks.remove(s, "c0de3")
        assert [h.id for h in webhooks.list_webhooks(s)] == ["c0d811111111", "c0de22222222"]
        assert webhooks.get(s, "c0de").id == "c0de22222222"  # unique once the other is gone


def test_an_ambiguous_job_prefix_names_the_jobs_it_matched(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same resolver: a job's ambiguous prefix names (at most three of) the matches."""
    made = [f"abcd{n:08d}" for n in range(5)]
    monkeypatch.setattr(jobs, "new_job_id", iter(made).__next__)
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 1, gpu_type("H100")),), NOW)
        for n in range(5):
            jobs.submit(s, {"command": ["true"], "name": f"j{n}"}, alice, now=NOW)
        with pytest.raises(ConflictError) as ambiguous:
            jobs.get_job(s, "abcd", alice)
        assert str(ambiguous.value) == (
            f"job id prefix 'abcd' is ambiguous ({', '.join(made[:3])}, ...); give more characters"
        )


admin = test_webhook_names.admin  # a client with an admin's token on an app, and its state


def test_the_api_pings_lists_and_removes_a_webhook_by_prefix(
    admin: tuple[TestClient, deps.ServerState],
) -> None:
    client, state = admin
    _hooks(state.db, "c0d811111111", "c0de22222222", "c0de33333333")
    pinged = client.post("/api/v1/webhooks/c0d8/ping")
    assert pinged.status_code == 202, pinged.text
    sent = client.get("/api/v1/webhooks/c0d8/deliveries")
    assert sent.status_code == 200 and [d["id"] for d in sent.json()] == [pinged.json()["id"]]
    refused = client.post("/api/v1/webhooks/c0de/ping")
    assert refused.status_code == 409, refused.text
    assert "c0de22222222, c0de33333333" in refused.json()["error"]["message"]
    assert client.delete("/api/v1/webhooks/c0de3").status_code == 204
    listed = [hook["id"] for hook in client.get("/api/v1/webhooks").json()]
    assert listed == ["c0d811111111", "c0de22222222"]
