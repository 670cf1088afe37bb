"""Disabling a user (``POST /users/{name}/disable``, ``/enable``) over real HTTP: a person who
left is shut out in one step. Their tokens are refused with a 401 that says so (not "unknown
or revoked"), none is issued to them, nothing is submitted in their name, their queued jobs
are not started (whatever queues them) while their running jobs run on, or are all cancelled
with ``cancel_jobs``; they stay listed, and the last enabled admin cannot be disabled. On
SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from helpers import live_server, spec, submit, wait_for, wait_state

from danlu.server.services import users

SLEEP = "import time; time.sleep(600)"


def _url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """The database of ``backend``: None for the home's SQLite file, else a clean,
    migrated PostgreSQL database (the ``db_url`` fixture)."""
    return None if backend == "sqlite" else str(request.getfixturevalue("db_url"))


def _user_with_token(admin: httpx.Client, name: str, role: str = "user") -> str:
    """Create user ``name``; its new token."""
    assert admin.post("/users", json={"name": name, "role": role}).status_code == 201
    made = admin.post(f"/users/{name}/tokens", json={"name": "laptop"})
    assert made.status_code == 201, made.text
    token: str = made.json()["token"]
    return token


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_disabled_users_tokens_are_refused_saying_why_until_enabled(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    db_url = _url(backend, request)
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as admin,
    ):
        token = _user_with_token(admin, "alice")
        with live.client(token) as alice:
            assert alice.get("/users/me").status_code == 200
            done = admin.post("/users/alice/disable")
            assert done.status_code == 200, done.text
            reply = done.json()
            assert reply["user"]["name"] == "alice"
            assert isinstance(reply["user"]["disabled_at"], float)
            assert (reply["queued"], reply["running"], reply["cancelled"]) == (0, 0, 0)
            refused = alice.get("/users/me")
            assert refused.status_code == 401
            error = refused.json()["error"]
            assert error["type"] == "AuthError"
            assert "'alice' is disabled" in error["message"]
            assert "danlu user enable alice" in error["message"]
            assert "unknown or revoked" not in error["message"]
            # her own token routes too: she cannot issue herself another
            assert alice.post("/users/alice/tokens", json={}).status_code == 401
            # an admin cannot give her one either until she is enabled
            issued = admin.post("/users/alice/tokens", json={"name": "new"})
            assert issued.status_code == 409
            assert issued.json()["error"]["field"] == "name"
            assert "danlu user enable alice" in issued.json()["error"]["message"]
            # she stays listed, disabled
            listed = {u["name"]: u for u in admin.get("/users").json()}
            assert listed["alice"]["disabled_at"] == reply["user"]["disabled_at"]
            assert listed["admin"]["disabled_at"] is None
            # again: nothing more changes, the first time is kept
            again = admin.post("/users/alice/disable", json={})
            assert again.status_code == 200
            assert again.json()["user"]["disabled_at"] == reply["user"]["disabled_at"]
            enabled = admin.post("/users/alice/enable")
            assert enabled.status_code == 200, enabled.text
            assert enabled.json()["user"]["disabled_at"] is None
            assert alice.get("/users/me").json()["name"] == "alice"
            assert admin.post("/users/alice/tokens", json={}).status_code == 201
            assert admin.post("/users/alice/enable").status_code == 200  # no change


def test_who_may_disable_whom(tmp_path: Path) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live,
        live.client() as admin,
    ):
        bob = _user_with_token(admin, "bob")
        with live.client(bob) as client:
            for path in ("/users/bob/disable", "/users/admin/disable", "/users/bob/enable"):
                refused = client.post(path)
                assert refused.status_code == 403, path
                assert "admins" in refused.json()["error"]["message"]
        missing = admin.post("/users/nobody/disable")
        assert missing.status_code == 404 and missing.json()["error"]["field"] == "name"
        assert admin.post("/users/nobody/enable").status_code == 404
        flag = admin.post("/users/bob/disable", json={"cancel_jobs": "yes"})
        assert flag.status_code == 422 and flag.json()["error"]["field"] == "cancel_jobs"
        unknown = admin.post("/users/bob/disable", json={"cancel": True})
        assert unknown.status_code == 422


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_last_enabled_admin_cannot_be_disabled(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    db_url = _url(backend, request)
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as admin,
    ):
        alone = admin.post("/users/admin/disable")
        assert alone.status_code == 409, alone.text
        error = alone.json()["error"]
        assert error["field"] == "name"
        assert "last enabled admin" in error["message"] and "--admin" in error["message"]
        assert admin.get("/users/me").status_code == 200
        second = _user_with_token(admin, "root2", role="admin")
        # a plain user is no admin to be left with
        _user_with_token(admin, "carol")
        assert admin.post("/users/admin/disable").status_code == 200  # root2 is left
        assert admin.get("/users/me").status_code == 401
        with live.client(second) as root2:
            last = root2.post("/users/root2/disable")
            assert last.status_code == 409 and "last enabled admin" in last.text
            assert root2.post("/users/admin/enable").status_code == 200
            assert root2.post("/users/root2/disable").status_code == 200  # admin is back
        assert admin.get("/users/me").status_code == 200


def test_nothing_is_submitted_in_a_disabled_users_name(tmp_path: Path) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB") as live,
        live.client() as admin,
    ):
        _user_with_token(admin, "alice")
        done = submit(admin, spec("before", "print(1)", user="alice"))
        wait_state(admin, done["id"], "SUCCEEDED")
        assert admin.post("/users/alice/disable").status_code == 200
        refused = admin.post("/jobs", json=spec("as-alice", "print(1)", user="alice"))
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["field"] == "user"
        assert "danlu user enable alice" in refused.json()["error"]["message"]
        trials = {"name": "s", "method": "grid", "parameters": {"lr": {"values": [0.1]}}}
        trials["trial"] = spec("trial", "print(1)", user="alice")
        sweep = admin.post("/sweeps", json=trials)
        assert sweep.status_code == 409 and sweep.json()["error"]["field"] == "trial.user"
        rerun = admin.post(f"/jobs/{done['id']}/rerun")
        assert rerun.status_code == 409 and rerun.json()["error"]["field"] == "user"
        # her history stays hers
        assert admin.get("/jobs", params={"user": "alice"}).json()[0]["id"] == done["id"]
        assert admin.post("/users/alice/enable").status_code == 200
        again = admin.post(f"/jobs/{done['id']}/rerun")
        assert again.status_code == 201 and again.json()["user"] == "alice"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_queued_jobs_wait_while_running_ones_run_on(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """Alice's running job runs on (its run's own token still reports metrics); her queued
    job is not started once GPUs are free (a later job of bob's starts instead, which a
    round would not do were hers let through: it asks for both GPUs, and came first), and
    starts once she is enabled."""
    db_url = _url(backend, request)
    with (
        live_server(tmp_path, fake_gpus="2x80GiB", db_url=db_url) as live,
        live.client() as admin,
    ):
        token = _user_with_token(admin, "alice")
        bob_token = _user_with_token(admin, "bob")
        with live.client(token) as alice:
            running = submit(alice, spec("runs", SLEEP, resources={"gpus": 1}))
            wait_state(alice, running["id"], "RUNNING")
            queued = submit(alice, spec("waits", SLEEP, resources={"gpus": 2}))
        reply = admin.post("/users/alice/disable").json()
        assert (reply["running"], reply["queued"], reply["cancelled"]) == (1, 1, 0)
        why = admin.get(f"/jobs/{queued['id']}/why").json()["reason"]
        assert why == users.owner_disabled("alice")
        # the running job's own token reports on; a user's token of hers does not
        assert live.prepared is not None
        db = live.prepared.app.state.danlu.db
        with db.session() as session:
            owner = users.get_user(session, "alice")
            run_token = users.issue_token(session, owner, "job run", job_id=running["id"])
        with live.client(run_token) as run:
            metrics = {"metrics": [{"step": 1, "loss": 0.5}]}
            posted = run.post(f"/jobs/{running['id']}/metrics", json=metrics)
            assert posted.status_code == 200, posted.text
        assert admin.post(f"/jobs/{running['id']}/cancel").status_code == 200
        wait_state(admin, running["id"], "CANCELLED")
        with live.client(bob_token) as bob:
            later = submit(bob, spec("bobs", SLEEP, resources={"gpus": 1}))
            wait_state(bob, later["id"], "RUNNING")
        still = admin.get(f"/jobs/{queued['id']}").json()
        assert still["state"] == "PENDING"
        assert still["pending_reason"] == users.owner_disabled("alice")
        # an admin's release of the job (held, then released) starts it no more than that
        assert admin.patch(f"/jobs/{queued['id']}", json={"held": True}).status_code == 200
        assert admin.patch(f"/jobs/{queued['id']}", json={"held": False}).status_code == 200
        assert admin.post(f"/jobs/{later['id']}/cancel").status_code == 200
        wait_state(admin, later["id"], "CANCELLED")
        wait_for(
            lambda: (
                admin.get(f"/jobs/{queued['id']}").json()["pending_reason"]
                == users.owner_disabled("alice")
            )
        )
        assert admin.get(f"/jobs/{queued['id']}").json()["state"] == "PENDING"
        enabled = admin.post("/users/alice/enable").json()
        assert (enabled["queued"], enabled["running"]) == (1, 0)
        wait_state(admin, queued["id"], "RUNNING")
        assert admin.post(f"/jobs/{queued['id']}/cancel").status_code == 200
        wait_state(admin, queued["id"], "CANCELLED")


def test_cancel_jobs_ends_every_unfinished_job_and_sweep(tmp_path: Path) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB") as live,
        live.client() as admin,
    ):
        token = _user_with_token(admin, "alice")
        with live.client(token) as alice:
            running = submit(alice, spec("runs", SLEEP, resources={"gpus": 1}))
            wait_state(alice, running["id"], "RUNNING")
            queued = submit(alice, spec("waits", SLEEP, resources={"gpus": 1}))
            sweep = {
                "name": "lr",
                "method": "grid",
                "parallel": 1,
                "parameters": {"lr": {"values": [0.1, 0.01, 0.001]}},
                "trial": spec("trial", SLEEP, resources={"gpus": 1}),
            }
            made = alice.post("/sweeps", json=sweep)
            assert made.status_code == 201, made.text
        done = admin.post("/users/alice/disable", json={"cancel_jobs": True})
        assert done.status_code == 200, done.text
        reply = done.json()
        # the queued job and the sweep's first trial end now; the running one is stopped
        assert (reply["cancelled"], reply["stopping"], reply["queued"]) == (2, 1, 0)
        assert reply["running"] == 0
        wait_state(admin, running["id"], "CANCELLED")
        ended = admin.get(f"/jobs/{queued['id']}").json()
        assert ended["state"] == "CANCELLED"
        events = admin.get(f"/jobs/{queued['id']}/events").json()
        assert events[-1]["reason"] == "cancelled: user alice was disabled by admin"
        got = admin.get(f"/sweeps/{made.json()['id']}").json()
        assert got["state"] == "CANCELLED" and got["submitted"] == 1
        # her usage keeps her name
        rows = admin.get("/usage").json()
        assert "alice" in {row["user"] for row in rows}


def test_a_follow_ends_once_its_user_is_disabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from danlu.server.routes import jobs as job_routes

    monkeypatch.setattr(job_routes, "TOKEN_RECHECK", 0.2)
    ticks = (
        "import time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(0.1)"
    )
    with live_server(tmp_path, follow_timeout=120) as live, live.client() as admin:
        token = _user_with_token(admin, "bob")
        with live.client(token) as bob:
            job = submit(bob, spec("ticks", ticks))
            wait_state(bob, job["id"], "RUNNING")
            seen, disabled = b"", False
            with bob.stream("GET", f"/jobs/{job['id']}/logs", params={"follow": "true"}) as s:
                for chunk in s.iter_bytes():  # ends once disabled, not with the job
                    seen += chunk
                    if b"tick 3" in seen and not disabled:
                        assert admin.post("/users/bob/disable").status_code == 200
                        disabled = True
            assert disabled and b"tick 599" not in seen
            assert admin.get(f"/jobs/{job['id']}").json()["state"] == "RUNNING"
        assert admin.post(f"/jobs/{job['id']}/cancel").status_code == 200
        wait_state(admin, job["id"], "CANCELLED")
