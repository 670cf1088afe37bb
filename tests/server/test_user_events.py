"""A user's history (``user_events``): each create, change, disable, enable, token issue and
revoke is an event with who did it and what changed, a change that changes nothing none, a
job run's own token none, never a token's secret; read oldest first, after an id or the
newest few. And ``GET /users/{name}`` and ``/users/{name}/events``: the user herself or an
admin, 403 for another, 404 naming an unknown user. The services and the app on SQLite."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from danlu.config import load_settings
from danlu.core.cluster import Node, gpu_type
from danlu.server.app import create_app
from danlu.server.db import Database
from danlu.server.services import cluster, disabling, jobs, user_events, users

T = 1_000_000.0
JOB = {"name": "j", "command": ["true"], "resources": {"gpus": 1}}


def _history(db: Database, name: str) -> list[tuple[float, str, str | None, str]]:
    with db.read_session() as s:
        rows = user_events.list_user_events(s, users.get_user(s, name))
        return [(e.time, e.kind, e.actor, e.detail) for e in rows]


def test_each_change_of_a_user_is_told_with_who_did_it(sqlite_db: Database) -> None:
    with sqlite_db.session() as s:
        cluster.replace_inventory(s, [Node("a", 1, gpu_type("H100"))], fake=True, now=T)
        root = users.create_user(s, "root", "admin", now=T)
        alice = users.create_user(s, "alice", now=T + 1, by=root)
        users.update_user(s, "alice", quota_gpus=8, os_user="asmith", by=root, now=T + 2)
        users.update_user(s, "alice", quota_gpus=8.0, by=root, now=T + 3)  # no change
        secret = users.issue_token(s, alice, "laptop", now=T + 4, by=alice)
        prefix = secret.split("_")[1]
        job = jobs.submit(s, JOB, alice, now=T + 4)
        users.issue_token(s, alice, "run", now=T + 4, job_id=job.id)  # a run's: not told
        users.revoke_tokens(s, alice, now=T + 5, prefix=prefix, by=root)
    with sqlite_db.session() as s:
        root = users.get_user(s, "root")
        disabling.disable(s, "alice", root, reason="left the team", now=T + 6)
        disabling.disable(s, "alice", root, now=T + 7)  # disabled already: nothing changes
        disabling.enable(s, "alice", now=T + 8, by=root)
        disabling.enable(s, "alice", now=T + 9, by=root)  # enabled already
    assert _history(sqlite_db, "alice") == [
        (T + 1, "created", "root", "role user"),
        (T + 2, "changed", "root", "os_user none -> asmith; quota_gpus none -> 8"),
        (T + 4, "token_issued", "alice", f"token {prefix} (laptop)"),
        (T + 5, "token_revoked", "root", f"token {prefix} (laptop)"),
        (T + 6, "disabled", "root", "left the team"),
        (T + 8, "enabled", "root", "was disabled by root: left the team"),
    ]
    assert _history(sqlite_db, "root") == [(T, "created", None, "role admin")]
    assert all(secret not in detail for *_, detail in _history(sqlite_db, "alice"))


def test_a_revoke_of_all_names_each_token_and_the_bootstrap_is_the_planes(
    sqlite_db: Database, tmp_path: Path
) -> None:
    token_file = tmp_path / "admin.token"
    with sqlite_db.session() as s:
        first = users.bootstrap_admin(s, token_file, now=T)
    assert first is not None
    token_file.unlink()  # a leaked admin token replaced: a start writes another
    with sqlite_db.session() as s:
        second = users.bootstrap_admin(s, token_file, now=T + 1)
    assert second is not None
    with sqlite_db.session() as s:
        admin = users.get_user(s, users.ADMIN)
        users.issue_token(s, admin, "", now=T + 2, by=admin)
        assert users.revoke_tokens(s, admin, now=T + 3, by=admin) == 2
    one, two = first.split("_")[1], second.split("_")[1]
    history = _history(sqlite_db, users.ADMIN)
    assert [(kind, actor) for _, kind, actor, _ in history] == [
        ("created", None),
        ("token_issued", None),
        ("token_revoked", None),
        ("token_issued", None),
        ("token_issued", "admin"),
        ("token_revoked", "admin"),
    ]
    assert history[2][3] == f"token {one} (bootstrap)"
    assert history[5][3].startswith(f"all live tokens (2): {two} (bootstrap), ")


def test_disabling_with_cancel_jobs_says_what_it_cancelled(sqlite_db: Database) -> None:
    with sqlite_db.session() as s:
        cluster.replace_inventory(s, [Node("a", 1, gpu_type("H100"))], fake=True, now=T)
        root = users.create_user(s, "root", "admin", now=T)
        alice = users.create_user(s, "alice", now=T)
        jobs.submit(s, JOB, alice, now=T)
        disabling.disable(s, "alice", root, cancel_jobs=True, now=T + 1)
        disabling.disable(s, "alice", root, cancel_jobs=True, now=T + 2)  # nothing left
    assert _history(sqlite_db, "alice")[1:] == [
        (T + 1, "disabled", "root", "cancel_jobs: 1 queued cancelled, 0 running being stopped")
    ]


def test_the_events_are_read_after_an_id_or_the_newest_few(sqlite_db: Database) -> None:
    with sqlite_db.session() as s:
        alice = users.create_user(s, "alice", now=T)
        for step in range(1, 5):
            users.set_quota(s, "alice", step, by=alice)
    with sqlite_db.read_session() as s:
        alice = users.get_user(s, "alice")
        every = [(e.id, e.detail) for e in user_events.list_user_events(s, alice)]
        after = user_events.list_user_events(s, alice, after_id=every[1][0], limit=2)
        newest = user_events.list_user_events(s, alice, limit=2, tail=True)
        assert [e.id for e in after] == [every[2][0], every[3][0]]
        assert [e.id for e in newest] == [every[3][0], every[4][0]]
    assert [detail for _, detail in every[1:]] == [
        f"quota_gpus {n - 1 or 'none'} -> {n}" for n in range(1, 5)
    ]


def test_a_user_and_her_events_are_hers_and_the_admins_to_read(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, fake_gpus="1x80GiB")
    db = Database(settings.db_url)
    with TestClient(create_app(settings, start_loops=False)) as http:
        with db.session() as s:
            root = users.create_user(s, "root", "admin", now=T)
            tokens = {"root": users.issue_token(s, root, now=T)}
            for name in ("alice", "bob"):
                tokens[name] = users.issue_token(s, users.create_user(s, name, now=T), now=T)
        db.dispose()

        def get(path: str, caller: str) -> tuple[int, object]:
            reply = http.get(
                f"/api/v1{path}", headers={"Authorization": f"Bearer {tokens[caller]}"}
            )
            return reply.status_code, reply.json()

        for caller in ("alice", "root"):
            code, record = get("/users/alice", caller)
            assert code == 200 and isinstance(record, dict), record
            listed = [u for u in get("/users", "root")[1] if u["name"] == "alice"]  # type: ignore[union-attr,index]
            assert [record] == listed
            code, events = get("/users/alice/events?tail=true&limit=1", caller)
            assert code == 200 and isinstance(events, list), events
            assert [(e["user"], e["kind"], e["actor"]) for e in events] == [
                ("alice", "token_issued", None)
            ]
        for path in ("/users/alice", "/users/alice/events"):
            code, error = get(path, "bob")
            assert code == 403 and "only 'alice' or an admin" in str(error), error
        code, error = get("/users/nobody", "root")
        assert code == 404 and "user 'nobody' not found" in str(error), error
        assert get("/users/nobody/events", "root")[0] == 404
        code, error = get("/users/alice/events?limit=0", "root")
        assert code == 422 and "limit" in str(error), error
