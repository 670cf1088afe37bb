"""A log follow stops once the token it was opened with is revoked: ``danlu user
revoke`` is the remedy for a leaked token, and a follow opened with it kept streaming the
job's output for up to the follow timeout (an hour)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from helpers import live_server, spec, submit, wait_state

from danlu.server.routes import jobs as job_routes

TICKS = "import time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(0.1)"


def test_a_follow_ends_once_its_token_is_revoked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_routes, "TOKEN_RECHECK", 0.2)
    with live_server(tmp_path, follow_timeout=120) as live, live.client() as admin:
        assert admin.post("/users", json={"name": "bob"}).status_code == 201
        token = admin.post("/users/bob/tokens", json={"name": "t"}).json()["token"]
        with live.client(token) as bob:
            job = submit(bob, spec("ticks", TICKS))
            wait_state(bob, job["id"], "RUNNING")
            url = f"/jobs/{job['id']}/logs"
            seen, revoked = b"", False
            with bob.stream("GET", url, params={"follow": "true"}) as stream:
                for chunk in stream.iter_bytes():  # ends once revoked, not with the job
                    seen += chunk
                    if b"tick 3" in seen and not revoked:
                        assert admin.delete("/users/bob/tokens").json()["revoked"] >= 1
                        revoked = True
            assert b"tick 3" in seen
            assert b"tick 599" not in seen
            assert admin.get(f"/jobs/{job['id']}").json()["state"] == "RUNNING"
            with pytest.raises(httpx.HTTPStatusError):
                bob.get(url).raise_for_status()
        admin.post(f"/jobs/{job['id']}/cancel")
