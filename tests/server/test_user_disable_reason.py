"""An admin's reason for disabling a user (``danlu user disable NAME --reason TEXT``): kept
with the admin's name on the user's row, shown in the user's JSON, in the 401 their tokens
get and in their queued jobs' ``pending_reason`` (a round's too); a reason given again
replaces it, none keeps it; enabling clears both. A reason with a control character or
too long is refused naming ``reason``. The services on SQLite."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.app import create_app
from danlu.server.db import Database
from danlu.server.routes.schemas import user_out
from danlu.server.services import disabling, jobs, users
from danlu.server.services.view import build_snapshot

T = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
LEFT = "left the team, see ticket 42"


def test_the_reason_and_the_admin_are_kept_shown_and_cleared_by_an_enable(
    sqlite_db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        root = users.create_user(s, "root", "admin", now=T)
        queued = jobs.submit(s, {"name": "queued", **BODY}, alice, now=T).id
        disabling.disable(s, "alice", root, reason=f"  {LEFT} ", now=T + 1)
    said = users.owner_disabled("alice", LEFT)
    assert said.startswith(f"owner alice is disabled ({LEFT}): not started")
    with sqlite_db.session() as s:
        alice = users.get_user(s, "alice")
        shown = user_out(alice)
        assert (shown["disabled_at"], shown["disabled_by"], shown["disable_reason"]) == (
            T + 1,
            "root",
            LEFT,
        )
        message = users.disabled_message(alice)
        assert message.startswith(f"user 'alice' is disabled (by root: {LEFT}): ")
        assert "danlu user enable alice" in message
        assert jobs.get_job(s, queued).pending_reason == said  # said at once
        # and by every round while she stays disabled
        assert users.disabled_reasons(s) == {"alice": said}
        assert build_snapshot(s, T + 2).withheld == {queued: said}
    with caplog.at_level(logging.INFO, logger=disabling.__name__), sqlite_db.session() as s:
        disabling.enable(s, "alice", now=T + 3, by=users.get_user(s, "root"))
    # the log keeps what the row no longer holds
    assert f"user alice enabled by root (disabled by root: {LEFT})" in caplog.text
    with sqlite_db.session() as s:
        alice = users.get_user(s, "alice")
        assert (alice.disabled_at, alice.disabled_by, alice.disable_reason) == (None, None, None)
        assert user_out(alice)["disable_reason"] is None
        assert jobs.get_job(s, queued).pending_reason == disabling.enabled_again("alice")


def test_a_reason_given_again_replaces_the_one_kept_and_none_keeps_it(
    sqlite_db: Database,
) -> None:
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        root = users.create_user(s, "root", "admin", now=T)
        users.create_user(s, "ops", "admin", now=T)
        queued = jobs.submit(s, {"name": "queued", **BODY}, alice, now=T).id
        disabling.disable(s, "alice", root, now=T + 1)
        alice = users.get_user(s, "alice")
        assert (alice.disabled_by, alice.disable_reason) == ("root", None)
        # no reason: the message and the job's reason read as before reasons were kept
        assert users.disabled_message(alice).startswith("user 'alice' is disabled (by root)")
        assert jobs.get_job(s, queued).pending_reason == users.owner_disabled("alice")
    with sqlite_db.session() as s:
        disabling.disable(s, "alice", users.get_user(s, "ops"), reason=LEFT, now=T + 5)
        alice = users.get_user(s, "alice")
        assert (alice.disabled_at, alice.disabled_by, alice.disable_reason) == (T + 1, "ops", LEFT)
        assert jobs.get_job(s, queued).pending_reason == users.owner_disabled("alice", LEFT)
    with sqlite_db.session() as s:
        disabling.disable(s, "alice", users.get_user(s, "root"), reason="  ", now=T + 6)
        alice = users.get_user(s, "alice")
        assert (alice.disabled_by, alice.disable_reason) == ("ops", LEFT)
        # the reason the enable finds is the one the disable wrote: the jobs are told
        disabling.enable(s, "alice", now=T + 7)
        assert jobs.get_job(s, queued).pending_reason == disabling.enabled_again("alice")


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("left\nthe team", "control characters"),
        ("\x1b[31mred", "control characters"),
        ("safe\u202etxt", "control characters"),
        ("x" * 201, "201 characters"),  # one over MAX_DISABLE_REASON
    ],
    ids=["line break", "ESC", "bidi override", "too long"],
)
def test_a_reason_with_a_control_character_or_too_long_is_refused_naming_it(
    sqlite_db: Database, reason: str, said: str
) -> None:
    with sqlite_db.session() as s:
        users.create_user(s, "alice", now=T)
        root = users.create_user(s, "root", "admin", now=T)
        with pytest.raises(SpecError) as refused:
            disabling.disable(s, "alice", root, reason=reason, now=T + 1)
        assert refused.value.field == "reason" and said in str(refused.value)
        assert not users.get_user(s, "alice").disabled  # nothing done
    assert disabling.checked_reason("x" * disabling.MAX_DISABLE_REASON) is not None


def test_the_route_takes_the_reason_and_the_disabled_users_401_gives_it(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, fake_gpus="1x80GiB")
    db = Database(settings.db_url)
    with TestClient(create_app(settings, start_loops=False)) as http:
        with db.session() as s:
            root = users.issue_token(s, users.create_user(s, "root", "admin", now=T), now=T)
            alice = users.issue_token(s, users.create_user(s, "alice", now=T), now=T)
        db.dispose()
        as_root = {"Authorization": f"Bearer {root}"}
        path = "/api/v1/users/alice/disable"
        for bad in ("left\nthe team", 5):
            refused = http.post(path, json={"reason": bad}, headers=as_root)
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["field"] == "reason"
        done = http.post(path, json={"reason": LEFT}, headers=as_root)
        assert done.status_code == 200, done.text
        shown = done.json()["user"]
        assert (shown["disabled_by"], shown["disable_reason"]) == ("root", LEFT)
        listed = {u["name"]: u for u in http.get("/api/v1/users", headers=as_root).json()}
        assert (listed["alice"]["disabled_by"], listed["alice"]["disable_reason"]) == ("root", LEFT)
        assert (listed["root"]["disabled_by"], listed["root"]["disable_reason"]) == (None, None)
        mine = http.get("/api/v1/users/me", headers={"Authorization": f"Bearer {alice}"})
        assert mine.status_code == 401
        assert f"(by root: {LEFT})" in mine.json()["error"]["message"]
        enabled = http.post("/api/v1/users/alice/enable", headers=as_root)
        assert enabled.status_code == 200, enabled.text
        assert (
            enabled.json()["user"]["disabled_by"],
            enabled.json()["user"]["disable_reason"],
        ) == (
            None,
            None,
        )
