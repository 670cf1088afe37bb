"""A token's ``last_used_at`` was written by a background task of the response: a request
refused after authentication (403, 404) never ran it, and the process then took the token
as written for a minute, so a token only ever refused (a leaked one probing other users'
jobs) showed no use at all, and a ``logs -f`` follow showed none until it ended. The use
is now written beside the request, whatever its answer."""

from __future__ import annotations

from pathlib import Path

from helpers import live_server, wait_for


def test_a_refused_request_is_a_use_of_its_token(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as admin:
        assert admin.post("/users", json={"name": "alice"}).status_code == 201
        token = admin.post("/users/alice/tokens", json={"name": "probe"}).json()["token"]

        def last_used() -> float | None:
            used: float | None = admin.get("/users/alice/tokens").json()[0]["last_used_at"]
            return used

        with live.client(token) as alice:
            assert alice.get("/jobs/ffffffffffff").status_code == 404
            assert alice.get("/users").status_code == 403
            assert wait_for(last_used, 10, 0.1) is not None
