"""Security over real HTTP: users see only their own jobs (403/404), tokens are required
(401), commands run as a literal argv (never a shell), and request strings cannot make the
server read a file outside its log directory."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import Live, live_server, spec, submit, wait_state

from danlu.executors import records
from danlu.server.services import users


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_server(tmp_path, fake_gpus="2x80GiB") as server:
        yield server


def _user(live: Live, name: str) -> str:
    with live.client() as admin:
        assert admin.post("/users", json={"name": name}).status_code == 201
        token: str = admin.post(f"/users/{name}/tokens", json={"name": "t"}).json()["token"]
        return token


def test_users_cannot_touch_each_others_jobs(live: Live) -> None:
    alice, bob = _user(live, "alice"), _user(live, "bob")
    with live.client(alice) as a, live.client(bob) as b:
        job = submit(a, spec("secret", "import time; print('alice-secret'); time.sleep(20)"))
        wait_state(a, job["id"], "RUNNING")
        for path in ("", "/events", "/logs", "/why", "/metrics"):
            response = b.get(f"/jobs/{job['id']}{path}")
            assert response.status_code in (403, 404), (path, response.text)
            assert "alice-secret" not in response.text
        assert b.post(f"/jobs/{job['id']}/cancel").status_code in (403, 404)
        posted = b.post(f"/jobs/{job['id']}/metrics", json={"metrics": [{"step": 1}]})
        assert posted.status_code in (403, 404)
        assert b.get("/jobs").json() == []
        others = b.get("/jobs", params={"user": "alice"})  # refused, not an empty list
        assert others.status_code == 403 and "alice-secret" not in others.text
        assert a.get(f"/jobs/{job['id']}").json()["state"] == "RUNNING"
        assert [j["id"] for j in a.get("/jobs").json()] == [job["id"]]
        assert b.post("/users/alice/tokens", json={}).status_code == 403
        a.post(f"/jobs/{job['id']}/cancel")
        wait_state(a, job["id"], "CANCELLED", timeout=20)
    with live.client() as admin:  # an admin sees everything
        assert admin.get(f"/jobs/{job['id']}/logs").status_code == 200


def test_tokens_are_required_and_checked(live: Live) -> None:
    base = f"{live.url}/api/v1"
    assert httpx.get(f"{base}/jobs").status_code == 401
    for header in (
        "Bearer",
        "Basic abc",
        f"Bearer {live.token}x",
        f"Token {live.token}",
        "Bearer dl_00000000_" + "a" * 43,
    ):
        response = httpx.get(f"{base}/jobs", headers={"Authorization": header})
        assert response.status_code == 401, header
        assert response.json()["error"]["type"] in ("AuthError", "http")
    assert httpx.post(f"{base}/jobs", json=spec("x", "print(1)")).status_code == 401
    assert httpx.get(f"{base}/health").status_code == 200


def test_command_is_a_literal_argv_never_a_shell(live: Live, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = f"; touch {marker} && echo $HOME `id` $(whoami) | cat > {marker}"
    code = "import sys; print(repr(sys.argv[1:]))"
    with live.client() as c:
        job = submit(c, {"name": "argv", "command": [sys.executable, "-c", code, evil, "*"]})
        wait_state(c, job["id"], "SUCCEEDED")
        text = c.get(f"/jobs/{job['id']}/logs").text
    assert repr([evil, "*"]) in text
    assert not marker.exists()


@pytest.mark.parametrize(
    "job_id",
    [
        "../../etc/passwd",
        "..%2F..%2Fetc%2Fpasswd",
        "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "..%252F..%252Fetc%252Fpasswd",
        "....//....//etc/passwd",
        "%2Fetc%2Fpasswd",
        "..",
        ".%00.",
        "..\\..\\etc\\passwd",
    ],
)
def test_log_path_traversal_cannot_escape(live: Live, job_id: str) -> None:
    with httpx.Client(headers={"Authorization": f"Bearer {live.token}"}) as c:
        for suffix in ("/logs", "/logs?follow=true", "/events", ""):
            response = c.get(f"{live.url}/api/v1/jobs/{job_id}{suffix}", timeout=10)
            assert "root:" not in response.text
            if response.request.url.path == "/api/v1/events":  # "jobs/.." folded away
                assert response.status_code == 200 and isinstance(response.json(), list)
                continue
            assert response.status_code in (404, 405, 422), (job_id, suffix, response.text)


def test_log_offset_cannot_read_other_jobs(live: Live) -> None:
    with live.client() as c:
        first = submit(c, spec("first", "print('first-only')"))
        second = submit(c, spec("second", "print('second')"))
        wait_state(c, first["id"], "SUCCEEDED")
        wait_state(c, second["id"], "SUCCEEDED")
        big = c.get(f"/jobs/{second['id']}/logs", params={"offset": 10**12})
        assert big.status_code == 200 and big.content == b""
        assert c.get(f"/jobs/{second['id']}/logs", params={"offset": -1}).status_code == 422
        assert "first-only" not in c.get(f"/jobs/{second['id']}/logs").text


def test_a_log_offset_past_the_file_system_s_largest_file_is_an_empty_read(
    live: Live, tmp_path: Path
) -> None:
    """An offset past 16 TiB (ext4's largest file) made the seek fail with ``EINVAL``: a
    500. At or past the log's end a read is empty and names the same offset."""
    with live.client() as c:
        job = submit(c, spec("short", "print('hi')"))
        wait_state(c, job["id"], "SUCCEEDED")
        for offset in (3, 2**44, 2**62):  # 2**62: the most the route takes
            got = c.get(f"/jobs/{job['id']}/logs", params={"offset": offset})
            assert got.status_code == 200, (offset, got.text)
            assert got.content == b"" and got.headers["X-Danlu-Log-Offset"] == str(offset)
    log = tmp_path / "a.log"
    log.write_bytes(b"hello")
    assert records.read_log(log, 2**44, 10) == (b"", 2**44)
    assert records.read_log(log, 5, 10) == (b"", 5)
    assert records.read_log(log, 1, 10) == (b"ello", 5)


# What a job's own token may do, tried from inside the job (any process that can read a job's
# environment holds it: with the local executor, every job runs as the server's user).
_TRY_TOKEN = """
import json, os, urllib.request, urllib.error
base = os.environ["DANLU_API_URL"] + "/api/v1"
me = os.environ["DANLU_JOB_ID"]
def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method, headers={
        "Authorization": "Bearer " + os.environ["DANLU_TOKEN"],
        "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
codes = {
    "own metrics": call("POST", f"/jobs/{me}/metrics", {"metrics": [{"step": 1, "loss": 1.0}]}),
    "list jobs": call("GET", "/jobs"),
    "own job": call("GET", f"/jobs/{me}"),
    "submit": call("POST", "/jobs", {"name": "x", "command": ["true"]}),
    "create user": call("POST", "/users", {"name": "mallory"}),
    "other metrics": call("POST", "/jobs/0123456789ab/metrics", {"metrics": [{"step": 1}]}),
}
print("CODES " + json.dumps(codes))
"""


def test_a_job_s_token_may_only_report_its_own_metrics(live: Live) -> None:
    """A run's ``DANLU_TOKEN`` was a full token of the job's user: another user's job that
    read it (from ``/proc/PID/environ``) could act as that user, as an admin for an admin's
    job. Now it reports the job's metrics and nothing else (403)."""
    with live.client() as admin:
        job = submit(admin, spec("tries", _TRY_TOKEN))
        wait_state(admin, job["id"], "SUCCEEDED")
        log = admin.get(f"/jobs/{job['id']}/logs").text
        codes = json.loads(log.split("CODES ", 1)[1].splitlines()[0])
        assert codes == {
            "own metrics": 200,
            "list jobs": 403,
            "own job": 403,
            "submit": 403,
            "create user": 403,
            "other metrics": 403,
        }, log
        assert [m["loss"] for m in admin.get(f"/jobs/{job['id']}/metrics").json()] == [1.0]
        # the user could: a user named mallory is created only now, not before
        assert admin.post("/users", json={"name": "mallory"}).status_code == 201


_PRINT_TOKEN = "import os; print('TOKEN=' + os.environ['DANLU_TOKEN'])"


def test_a_finished_job_s_run_token_writes_nothing_more(live: Live) -> None:
    """A run's token outlived its run: after the job ended it still POSTed metrics that
    rewrote the finished job's ``checkpoint_step``. The run's end revokes it (401); a run
    token still live for a finished job (issued before that rule) is refused with a 409
    saying why; the owner's own token may still add records."""
    alice = _user(live, "alice")
    with live.client(alice) as a:
        job = submit(a, spec("t", _PRINT_TOKEN))
        wait_state(a, job["id"], "SUCCEEDED")
        token = a.get(f"/jobs/{job['id']}/logs").text.split("TOKEN=")[1].split()[0]
        assert [t["job_id"] for t in a.get("/users/alice/tokens").json()] == [None]
        late = {"metrics": [{"step": 10**9, "checkpoint_step": 10**9}]}
        with live.client(token) as run:
            assert run.post(f"/jobs/{job['id']}/metrics", json=late).status_code == 401
        assert live.prepared is not None
        with live.prepared.app.state.danlu.db.session() as s:  # one the rule never revoked
            owner = users.get_user(s, "alice")
            stale = users.issue_token(s, owner, "job old#1", job_id=job["id"])
        with live.client(stale) as run:
            refused = run.post(f"/jobs/{job['id']}/metrics", json=late)
        assert refused.status_code == 409, refused.text
        assert "has finished (SUCCEEDED)" in refused.json()["error"]["message"]
        assert a.get(f"/jobs/{job['id']}").json()["checkpoint_step"] is None
        own = a.post(f"/jobs/{job['id']}/metrics", json={"metrics": [{"step": 1}]})
        assert own.status_code == 200 and own.json()["accepted"] == 1
