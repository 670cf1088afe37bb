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
        assert b.get("/jobs", params={"user": "alice"}).json() == []
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
