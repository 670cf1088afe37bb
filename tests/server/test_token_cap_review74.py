"""API tokens: a user could issue any number of live tokens (a script issuing
one per call filled the table, and ``GET /users/NAME/tokens`` listed them all). A user now
holds at most :data:`~danlu.server.services.users.MAX_LIVE_TOKENS` live tokens of its own;
one more is refused with 409, naming the limit and how to revoke one. The tokens of job
runs (one a running job, revoked when the run ends) do not count."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import live_server

from danlu.server.db import Database
from danlu.server.errors import ConflictError
from danlu.server.services import jobs, users
from danlu.server.services.users import MAX_LIVE_TOKENS

NOW = 1_000_000.0


def _fill(db: Database, name: str, count: int = MAX_LIVE_TOKENS) -> None:
    with db.session() as s:
        owner = users.get_user(s, name)
        for i in range(count):
            users.issue_token(s, owner, f"t{i}", now=NOW)


def test_one_token_past_the_limit_is_refused_naming_it_and_how_to_revoke(
    seeded: Database,
) -> None:
    _fill(seeded, "alice")
    with seeded.session() as s, pytest.raises(ConflictError) as refused:
        users.issue_token(s, users.get_user(s, "alice"), "one more", now=NOW)
    message = str(refused.value)
    assert f"{MAX_LIVE_TOKENS} live API tokens" in message
    assert "danlu user revoke alice PREFIX" in message
    assert "DELETE /api/v1/users/alice/tokens/PREFIX" in message
    with seeded.read_session() as s:
        assert len(users.live_tokens(s, users.get_user(s, "alice"))) == MAX_LIVE_TOKENS


def test_a_revoked_token_makes_room_and_other_users_are_not_limited(seeded: Database) -> None:
    _fill(seeded, "alice")
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        prefix = users.live_tokens(s, alice)[0].prefix
        assert users.revoke_tokens(s, alice, now=NOW, prefix=prefix) == 1
        assert users.issue_token(s, alice, "again", now=NOW).startswith("dl_")
        assert users.issue_token(s, users.get_user(s, "bob"), now=NOW).startswith("dl_")


def test_the_tokens_of_job_runs_do_not_count(seeded: Database) -> None:
    _fill(seeded, "alice")
    body = {"name": "j", "command": ["python", "train.py"], "resources": {"gpus": 1}}
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job = jobs.submit(s, body, alice, now=NOW)
        # the launcher's token for the job's run: issued whatever the user holds
        assert users.issue_token(s, alice, "run", now=NOW, job_id=job.id).startswith("dl_")
        assert len(users.live_tokens(s, alice)) == MAX_LIVE_TOKENS + 1


def test_the_admin_bootstrap_is_never_refused(seeded: Database, tmp_path: Path) -> None:
    path = tmp_path / "admin.token"
    with seeded.session() as s:
        assert users.bootstrap_admin(s, path, now=NOW) is not None
        assert users.revoke_tokens(s, users.get_user(s, users.ADMIN), now=NOW) == 1
    _fill(seeded, users.ADMIN)  # made by hand: the bootstrap revokes none of them
    path.unlink()  # a lost token file: the next start issues another
    with seeded.session() as s:
        assert users.bootstrap_admin(s, path, now=NOW) is not None


def test_the_api_answers_409_naming_the_limit(tmp_path: Path) -> None:
    with live_server(tmp_path, start_loops=False) as live, live.client() as admin:
        assert admin.post("/users", json={"name": "carol"}).status_code == 201
        for _ in range(MAX_LIVE_TOKENS):
            assert admin.post("/users/carol/tokens", json={}).status_code == 201
        refused = admin.post("/users/carol/tokens", json={"name": "one more"})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["type"] == "ConflictError"
        assert "100 live API tokens" in refused.json()["error"]["message"]
        assert len(admin.get("/users/carol/tokens").json()) == MAX_LIVE_TOKENS
