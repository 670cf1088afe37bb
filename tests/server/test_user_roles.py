"""A user's role changed by an admin (``PUT /users/{name}`` with ``role``): each change a
``changed`` event by its admin, a bad role refused naming ``role``, and the last enabled
admin never demoted, by one demote or by two at once (PostgreSQL: the second waits for the
first and sees it). The name ``me`` is reserved (``GET /users/me`` is the caller), one
stored before still reached by its name. Token events go with their tokens, 30 days after
a revocation: a loop of issues and revokes no longer grows a user's history for good."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from interleave import Interleave
from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.errors import SpecError
from danlu.executors import FakeExecutor, FakeWorld
from danlu.server import purge
from danlu.server.app import create_app
from danlu.server.db import Database, User
from danlu.server.errors import ConflictError
from danlu.server.services import disabling, retention, user_events, users

T = 1_000_000_000.0
DAY = retention.DAY


def _events(db: Database, name: str) -> list[tuple[str, str | None, str]]:
    """``name``'s events as ``(kind, actor, detail)``, oldest first."""
    with db.read_session() as s:
        rows = user_events.list_user_events(s, users.get_user(s, name))
        return [(e.kind, e.actor, e.detail) for e in rows]


def _enabled_admins(db: Database) -> list[str]:
    with db.read_session() as s:
        query = select(User.name).where(User.role == "admin", User.disabled_at.is_(None))
        return sorted(s.scalars(query))


def test_a_role_change_is_an_event_and_the_last_enabled_admin_stays_one(
    sqlite_db: Database,
) -> None:
    with sqlite_db.session() as s:
        root = users.create_user(s, "root", "admin", now=T)
        users.create_user(s, "alice", now=T)
    with sqlite_db.session() as s:
        root = users.get_user(s, "root")
        users.update_user(s, "alice", role="admin", quota_gpus=4, by=root, now=T + 1)
    assert _events(sqlite_db, "alice")[-1] == (
        "changed",
        "root",
        "role user -> admin; quota_gpus none -> 4",
    )
    with sqlite_db.session() as s:  # root left: alice is the last enabled admin
        users.update_user(s, "root", role="user", by=users.get_user(s, "alice"), now=T + 2)
    with sqlite_db.session() as s, pytest.raises(ConflictError) as refused:
        users.update_user(s, "alice", role="user", by=users.get_user(s, "alice"), now=T + 3)
    assert refused.value.field == "role"
    assert "'alice' is the last enabled admin" in str(refused.value)
    assert "--role admin" in str(refused.value)
    with sqlite_db.session() as s, pytest.raises(SpecError) as bad:
        users.update_user(s, "root", role="boss")
    assert bad.value.field == "role" and "admin, user" in str(bad.value)
    # a disabled admin is no admin to be left with; demoting one loses none
    with sqlite_db.session() as s:
        alice = users.get_user(s, "alice")
        users.update_user(s, "root", role="admin", by=alice, now=T + 4)
        disabling.disable(s, "root", alice, now=T + 5)
    with sqlite_db.session() as s, pytest.raises(ConflictError):
        users.update_user(s, "alice", role="user", now=T + 6)
    with sqlite_db.session() as s:
        users.update_user(s, "root", role="user", now=T + 6)
    assert _enabled_admins(sqlite_db) == ["alice"]
    assert [e for e in _events(sqlite_db, "alice") if e[0] == "changed"] == [
        ("changed", "root", "role user -> admin; quota_gpus none -> 4")
    ]


@pytest.mark.parametrize("backend", ["postgresql"])
def test_two_admins_demoted_at_once_leave_one(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.session() as s:
        users.create_user(s, "root1", "admin", now=T)
        users.create_user(s, "root2", "admin", now=T)
    race = Interleave(db)
    race.pause_at(monkeypatch, user_events, "record")  # the first's demote done, not committed

    def demote(name: str, by: str) -> object:
        return lambda s: users.update_user(s, name, role="user", by=users.get_user(s, by))

    out = race.run(demote("root1", "root2"), demote("root2", "root1"))
    assert out.first_error is None and out.second_waited
    assert isinstance(out.second_error, ConflictError), out.second_error
    assert "'root2' is the last enabled admin" in str(out.second_error)
    assert _enabled_admins(db) == ["root2"]


def test_the_route_changes_a_role_and_refuses_me_keeping_an_older_me(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, fake_gpus="1x80GiB")
    db = Database(settings.db_url)
    with TestClient(create_app(settings, start_loops=False)) as http:
        with db.session() as s:
            root = users.issue_token(s, users.create_user(s, "root", "admin", now=T), now=T)
        auth = {"Authorization": f"Bearer {root}"}
        for name in ("me", "ME"):
            made = http.post("/api/v1/users", json={"name": name}, headers=auth)
            assert made.status_code == 422, made.text
            assert made.json()["error"]["field"] == "name"
            assert "reserved" in made.json()["error"]["message"]
        with db.session() as s:
            s.add(User(name="me", role="user", created_at=T))  # stored before `me` was reserved
        db.dispose()
        for bad in ("boss", None):
            refused = http.put("/api/v1/users/me", json={"role": bad}, headers=auth)
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["field"] == "role" and "'admin'" in error["message"], error
            assert "'user'" in error["message"]
        # the older `me` is reached by its name on every route but GET /users/me
        promoted = http.put("/api/v1/users/me", json={"role": "admin"}, headers=auth)
        assert promoted.status_code == 200 and promoted.json()["name"] == "me", promoted.text
        listed = {u["name"]: u["role"] for u in http.get("/api/v1/users", headers=auth).json()}
        assert listed["me"] == "admin"
        told = http.get("/api/v1/users/me/events", headers=auth).json()
        assert (told[-1]["user"], told[-1]["detail"]) == ("me", "role user -> admin")
        assert http.post("/api/v1/users/me/disable", headers=auth).status_code == 200
        # `me` is an admin, disabled: root is the last enabled one
        last = http.put("/api/v1/users/root", json={"role": "user"}, headers=auth)
        assert last.status_code == 409 and last.json()["error"]["field"] == "role", last.text
        assert "last enabled admin" in last.json()["error"]["message"]


def test_token_events_go_with_their_tokens_and_the_rest_stays(
    sqlite_db: Database, tmp_path: Path
) -> None:
    keep = users.KEEP_REVOKED_SECONDS
    with sqlite_db.session() as s:
        bot = users.create_user(s, "bot", now=T - 400 * DAY)
        users.update_user(s, "bot", quota_gpus=1, now=T - 400 * DAY)
        users.issue_token(s, bot, "live", now=T - 400 * DAY, by=bot)
        users.issue_token(s, bot, "lately", now=T - 300 * DAY, by=bot)
        users.issue_token(s, bot, "long-ago", now=T - 200 * DAY, by=bot)
        users.revoke_tokens(s, bot, prefix=_prefix(s, bot, "long-ago"), now=T - keep - 1, by=bot)
        users.revoke_tokens(s, bot, prefix=_prefix(s, bot, "lately"), now=T - keep + 1, by=bot)
    executor = FakeExecutor(Cluster((Node("a", 1, gpu_type("H100")),)), FakeWorld())
    deleted = purge.Purger(sqlite_db, executor, tmp_path, 0.0).purge_stale(T)
    assert sorted(deleted.values()) == [0, 1, 2], deleted  # a token, its two events
    kept = [(kind, detail.split(" (")[-1]) for kind, _, detail in _events(sqlite_db, "bot")]
    assert kept == [
        ("created", "role user"),
        ("changed", "quota_gpus none -> 1"),
        ("token_issued", "live)"),  # live, however old
        ("token_issued", "lately)"),  # its token revoked a month ago less a second
        ("token_revoked", "lately)"),
    ]


def _prefix(session: Session, user: User, label: str) -> str:
    """The prefix of ``user``'s live token labelled ``label``."""
    return next(row.prefix for row in users.live_tokens(session, user) if row.name == label)
