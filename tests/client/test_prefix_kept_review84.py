"""A job given by an id prefix is asked for by its full id once read: :meth:`Client.wait`
and :meth:`Client.follow_log_bytes` asked for the prefix at every poll, and once a job
submitted meanwhile shared it, the server answered 409 (ambiguous) and the wait or follow
failed with a ConflictError."""

from __future__ import annotations

from typing import Any

import httpx

from danlu.client import Client

FIRST = "abcd00000001"
LATER = "abcd00000002"


class Server:
    """``GET /jobs/{key}`` resolving an id or a prefix (409 when several share it) and
    ``GET /jobs/{key}/logs``; ``step()`` is called at each job read."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {FIRST: {"id": FIRST, "state": "RUNNING"}}
        self.reads = 0
        self.asked: list[str] = []

    def step(self) -> None:
        self.reads += 1
        if self.reads == 1:  # a job sharing the prefix is submitted
            self.jobs[LATER] = {"id": LATER, "state": "PENDING"}
        if self.reads == 2:
            self.jobs[FIRST]["state"] = "SUCCEEDED"

    def __call__(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.removeprefix("/api/v1/jobs/").split("/")
        self.asked.append(request.url.path)
        hits = [job for ident, job in self.jobs.items() if ident.startswith(parts[0])]
        if len(hits) != 1:
            error = {"type": "ConflictError", "message": "job id prefix is ambiguous"}
            return httpx.Response(409, json={"error": error})
        (job,) = hits
        if len(parts) == 1:
            answer = dict(job)
            self.step()
            return httpx.Response(200, json=answer)
        offset = int(request.url.params.get("offset", "0"))
        text = b"log line\n"[offset:]
        return httpx.Response(
            200, content=text, headers={"X-Danlu-Log-Offset": str(offset + len(text))}
        )


def test_a_wait_by_prefix_outlives_a_job_sharing_it() -> None:
    server = Server()
    with Client("http://danlu.test", "tok", transport=httpx.MockTransport(server)) as client:
        (job,) = client.wait(["abcd"], poll=0.01, timeout=10)
    assert job == {"id": FIRST, "state": "SUCCEEDED"}
    assert server.asked[0] == "/api/v1/jobs/abcd"
    assert set(server.asked[1:]) == {f"/api/v1/jobs/{FIRST}"}


def test_a_log_follow_by_prefix_outlives_a_job_sharing_it() -> None:
    server = Server()
    with Client("http://danlu.test", "tok", transport=httpx.MockTransport(server)) as client:
        got = b"".join(client.follow_log_bytes("abcd", reconnect_delay=0))
    assert got == b"log line\n"
    assert server.reads == 3  # running (a job shares the prefix now), running, succeeded
    assert all(FIRST in path for path in server.asked[2:]), server.asked
