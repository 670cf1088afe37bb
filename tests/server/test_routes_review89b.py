"""The routes' fixes:

- a log follow ends at the server's follow timeout while the log keeps growing too (it was
  checked only once a read found nothing new: the follow of a job writing faster than its
  reader took it never ended);
- a body sent without ``Content-Type: application/json`` (``curl -d`` sends a form's) is a
  422 naming ``body`` that says to send JSON with that header, not "Input should be a valid
  dictionary or object to extract fields from" about a body that is a JSON object;
- a JSON body nested too deeply to parse is a 422 naming ``body``, not a bare 400 with no
  field;
- the dashboard's files forbid framing in the header old browsers read too
  (``X-Frame-Options``), besides the policy's ``frame-ancestors``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from helpers import Live, live_server, spec, submit

from danlu.executors import Handle
from danlu.server.routes import jobs as job_routes


class _Chatty:
    """An executor whose run's log always has more to read (a job writing non-stop)."""

    def __init__(self) -> None:
        self.reads = 0

    def logs(self, run: Handle, offset: int, limit: int) -> tuple[bytes, int]:
        self.reads += 1
        return b"x", offset + 1


def test_a_follow_of_a_log_that_keeps_growing_ends_at_the_follow_timeout() -> None:
    executor = _Chatty()
    state: Any = SimpleNamespace(executor=executor, follow_timeout=0.0)

    async def read(most: int) -> tuple[int, bool]:
        """(chunks read, whether the follow ended) after at most ``most`` chunks."""
        stream = job_routes._follow(state, Handle("job1", 1), 0)
        chunks = 0
        async for _chunk in stream:
            chunks += 1
            if chunks >= most:
                await stream.aclose()
                return chunks, False
        return chunks, True

    chunks, ended = asyncio.run(read(200))
    assert ended, "the follow went on past its timeout while the log grew"
    assert chunks == 1  # what it read before it looked at the clock


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as server:
        yield server


_BODY = b'{"name": "plain", "command": ["true"]}'
_READS_UNTYPED = pytest.mark.skipif(
    "strict_content_type" not in inspect.signature(FastAPI).parameters,
    reason="this FastAPI reads a body without a Content-Type as JSON",
)


@pytest.mark.parametrize(
    ("content_type", "shown"),
    [
        ("application/x-www-form-urlencoded", "application/x-www-form-urlencoded"),
        ("text/plain", "text/plain"),
        pytest.param(None, "none", marks=_READS_UNTYPED),
    ],
)
def test_a_body_not_sent_as_json_says_to_send_it_so(
    live: Live, content_type: str | None, shown: str
) -> None:
    headers = {"Authorization": f"Bearer {live.token}"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    with httpx.Client(base_url=f"{live.url}/api/v1", timeout=30.0) as c:
        # httpx adds no Content-Type to raw content: the "none" case sends none
        for path in ("/jobs", "/sweeps", "/projects"):
            response = c.post(path, content=_BODY, headers=headers)
            assert response.status_code == 422, (path, response.text)
            error = response.json()["error"]
            assert error["field"] == "body", error
            assert "Content-Type: application/json" in error["message"], error
            assert shown in error["message"], error
    with live.client() as c:  # JSON, as every danlu client sends it: taken as before
        assert c.post("/jobs", json={"name": "plain", "command": ["true"]}).status_code == 201
        wrong = c.post("/jobs", json=["not", "an", "object"])  # JSON, but not an object
        assert wrong.status_code == 422
        assert "Content-Type" not in wrong.json()["error"]["message"]


def test_a_body_nested_too_deeply_is_a_422_naming_the_body(live: Live) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with live.client() as c:
        for path in ("/jobs", "/sweeps", "/cluster/nodes/localhost/cordon"):
            response = c.post(path, content=deep, headers={"Content-Type": "application/json"})
            assert response.status_code == 422, (path, response.text)
            error = response.json()["error"]
            assert error["type"] == "SpecError" and error["field"] == "body", error
            assert "nested" in error["message"], error
        job = submit(c, spec("m", "pass"))
        metrics = b'{"metrics": [{"step": 1, "a": ' + deep + b"}]}"
        response = c.post(
            f"/jobs/{job['id']}/metrics",
            content=metrics,
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "body"


def test_the_dashboard_files_forbid_framing_in_every_browser(live: Live) -> None:
    for name in ("", "app.js", "app.css", "favicon.svg"):
        response = httpx.get(f"{live.url}/dashboard/{name}")
        assert response.status_code == 200, name
        assert response.headers["x-frame-options"] == "DENY", name
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
