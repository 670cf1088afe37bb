"""End to end, as a lab's platform engineer sets danlu up (docs/deploy.md, "Users, tokens and
projects"): the admin adds two users with tokens and GPU quotas; each submits over the CLI
with their own token; neither sees nor cancels nor holds the other's jobs (a clear ``error:``
line, exit 2); a job past its user's quota waits with the quota named in ``danlu why``, one
that alone asks for more is refused naming ``resources.gpus``; and a revoked token is refused
while the job it submitted runs on."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_server import Server, danlu

from danlu.client import Client

pytestmark = pytest.mark.slow


def _spec(tmp_path: Path, name: str, seconds: int) -> Path:
    spec = tmp_path / f"{name}.json"
    command = [sys.executable, "-c", f"import time; time.sleep({seconds})"]
    spec.write_text(json.dumps({"name": name, "command": command, "resources": {"gpus": 1}}))
    return spec


def _job_state(admin: Client, job: str, wanted: str, timeout: float = 30) -> dict[str, Any]:
    """The job once it is in ``wanted`` (polled; fails after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        found = admin.get_job(job)
        if found["state"] == wanted or time.monotonic() > deadline:
            assert found["state"] == wanted, found
            return found
        time.sleep(0.2)


def _submitted_id(stdout: str) -> str:
    """The id out of ``submitted job ID (NAME): STATE``."""
    assert stdout.startswith("submitted job "), stdout
    return stdout.split()[2]


@pytest.fixture
def admin(server: Server) -> Iterator[Client]:
    """The admin's client; every job still unfinished at the end is cancelled, since
    stopping the server leaves its jobs running."""
    with server.client() as client:
        try:
            yield client
        finally:
            for job in client.list_jobs():
                if job["state"] in ("PENDING", "RUNNING", "PREEMPTING", "RESTARTING"):
                    client.cancel(job["id"])


def test_two_users_see_and_touch_only_their_own_jobs(
    server: Server, admin: Client, tmp_path: Path
) -> None:
    url = json.loads((server.home / "server.json").read_text())["url"]
    for name in ("alice", "bob"):
        admin.create_user(name)
        admin.update_user(name, quota_gpus=1)
    as_alice = ("--url", url, "--token", admin.create_token("alice", "laptop"))
    as_bob = ("--url", url, "--token", admin.create_token("bob"))

    first = danlu("submit", str(_spec(tmp_path, "a-first", 120)), *as_alice)
    assert first.returncode == 0, first.stderr
    running = _submitted_id(first.stdout)
    _job_state(admin, running, "RUNNING")
    second = danlu("submit", str(_spec(tmp_path, "a-second", 120)), *as_alice)
    assert second.returncode == 0, second.stderr
    queued = _submitted_id(second.stdout)

    # past her quota the second waits, and says why
    deadline = time.monotonic() + 30
    while "waiting for quota" not in str(admin.get_job(queued).get("pending_reason")):
        assert time.monotonic() < deadline, admin.get_job(queued)
        time.sleep(0.2)
    why = danlu("why", queued, *as_alice)
    assert why.returncode == 0, why.stderr
    assert "waiting for quota: user 'alice' GPU quota: 1 in use + 1 asked > 1" in why.stdout

    # bob sees none of alice's jobs and can act on none of them
    listed = danlu("ls", "--json", *as_bob)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    for command in ("cancel", "hold"):
        refused = danlu(command, running, *as_bob)
        assert refused.returncode == 2, (command, refused.stdout, refused.stderr)
        assert refused.stderr.startswith("error: "), (command, refused.stderr)
        assert "belongs to another user" in refused.stderr, (command, refused.stderr)
    assert admin.get_job(running)["state"] == "RUNNING"
    assert admin.get_job(queued)["held_at"] is None

    # a job that alone asks for more than bob's quota can never start: refused, its flag named
    too_big = danlu("submit", str(_spec(tmp_path, "b-big", 1)), "--gpus", "2", *as_bob)
    assert too_big.returncode == 2
    assert too_big.stderr.startswith("error: --gpus: can never start: "), too_big.stderr
    assert "user 'bob' GPU quota" in too_big.stderr

    # her tokens revoked (she left), her token is refused; the job it submitted runs on
    assert admin.revoke_tokens("alice") >= 1
    gone = danlu("ls", *as_alice)
    assert gone.returncode == 2
    assert "the API token is unknown or revoked" in gone.stderr, gone.stderr
    assert admin.get_job(running)["state"] == "RUNNING"
