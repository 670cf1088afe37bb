"""A request body is capped, and a token route refuses a request with no bearer
token before reading its body.

Authentication is a FastAPI dependency, and FastAPI reads and parses a body before it
solves the dependencies: a 120 MB JSON array POSTed to ``/api/v1/jobs`` with no token at all
was read and parsed in full on the event loop (``/health`` waited seconds meanwhile) before
its 401, and malformed JSON with no token was a 422. Now every body has a cap (413, refused
on its ``Content-Length`` before a byte is read, or as a chunked body passes it), and a
route that needs a token answers 401 to a request without one before its body is read.
Over real HTTP (uvicorn on 127.0.0.1) and at the ASGI level, where the reads of the body
are counted.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from helpers import Live, live_server, spec, submit
from starlette.types import Message

from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.core.metric_record import MAX_RECORD_BYTES
from danlu.server.app import MAX_BODY_BYTES, create_app
from danlu.server.routes import admin, dashboard, events, jobs, sweeps, webhooks
from danlu.server.routes.deps import needs_token
from danlu.server.services.metrics import MAX_BATCH

SMALL_CAP = 4096
SOCKET_TIMEOUT_S = 20.0
"""How long a raw-socket test waits for an answer: one that never comes (the server waiting
for a body it should have refused) fails the test instead of hanging it."""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """One real server for the module (no loops: nothing here needs a job to run)."""
    with live_server(tmp_path_factory.mktemp("body"), start_loops=False) as server:
        yield server


@pytest.fixture
def small_app(tmp_path: Path) -> Iterator[FastAPI]:
    """An app (no loops, no lifespan) whose bodies are capped at :data:`SMALL_CAP` bytes."""
    settings = load_settings(home=tmp_path / "home", fake_gpus="1x80GiB")
    app = create_app(settings, start_loops=False, max_body_bytes=SMALL_CAP)
    try:
        yield app
    finally:
        app.state.danlu.executor.close()
        app.state.danlu.db.dispose()


def _raw(live: Live, head: str, body: Sequence[bytes] = ()) -> tuple[int, dict[str, str], Any]:
    """Send ``head`` (request line and headers, ``\\r\\n``-separated, no blank line) and then
    ``body``'s parts over a plain socket, and read one response: its status, headers and
    JSON body. Only what is given is sent: a server that waits for more times out."""
    address = urlsplit(live.url)
    assert address.hostname is not None and address.port is not None
    with socket.create_connection((address.hostname, address.port), SOCKET_TIMEOUT_S) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n\r\n")
        try:
            for part in body:
                sock.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused, and closed, before the end of the body: its answer is there
        response = http.client.HTTPResponse(sock)
        response.begin()
        data = response.read()
        headers = {k.lower(): v for k, v in response.getheaders()}
        return response.status, headers, json.loads(data)


def _chunked(parts: Sequence[bytes]) -> list[bytes]:
    """``parts`` in HTTP/1.1 chunked transfer coding, with the last, empty chunk."""
    return [b"%x\r\n%s\r\n" % (len(part), part) for part in parts] + [b"0\r\n\r\n"]


def _is_error(payload: Any, kind: str) -> str:
    """The message of docs/api.md's error body ``payload`` of type ``kind``."""
    assert set(payload) == {"error"}, payload
    assert set(payload["error"]) == {"type", "field", "message"}, payload
    assert payload["error"]["type"] == kind, payload
    message: str = payload["error"]["message"]
    return message


def _names_the_cap(message: str, cap: int) -> None:
    assert str(cap) in message.replace(",", ""), message
    assert "DANLU_MAX_BODY_BYTES" in message, message


# --- the cap ---------------------------------------------------------------------------------


def test_an_oversized_content_length_is_413_before_the_body_is_sent(live: Live) -> None:
    head = (
        "POST /api/v1/jobs HTTP/1.1\r\nHost: danlu\r\n"
        f"Authorization: Bearer {live.token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {MAX_BODY_BYTES + 1}"
    )
    status, headers, payload = _raw(live, head)  # not one byte of the body is sent
    assert status == 413, payload
    assert headers.get("connection") == "close", headers  # the body is not drained either
    _names_the_cap(_is_error(payload, "http"), MAX_BODY_BYTES)


def test_an_oversized_chunked_body_is_413(live: Live) -> None:
    # not JSON: read in full and parsed, it was a 422
    part = b"x" * (1 << 20)
    parts = [part] * (MAX_BODY_BYTES // len(part) + 1)
    head = (
        "POST /api/v1/jobs HTTP/1.1\r\nHost: danlu\r\n"
        f"Authorization: Bearer {live.token}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked"
    )
    status, _, payload = _raw(live, head, _chunked(parts))
    assert status == 413, payload
    _names_the_cap(_is_error(payload, "http"), MAX_BODY_BYTES)


def _scope(method: str, path: str, headers: Sequence[tuple[str, str]]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8470),
    }


def _drive(
    app: FastAPI, method: str, path: str, headers: Sequence[tuple[str, str]], parts: list[bytes]
) -> tuple[int, Any, int]:
    """One request to ``app`` at the ASGI level, its body in ``parts`` (one
    ``http.request`` message each): the status, the JSON body and how many of the parts the
    app read."""
    read = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        if read >= len(parts):
            return {"type": "http.disconnect"}
        read += 1
        return {"type": "http.request", "body": parts[read - 1], "more_body": read < len(parts)}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app(_scope(method, path, headers), receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(start["status"]), json.loads(body), read


BEARER = ("Authorization", "Bearer dl_not_a_real_token")


def test_a_declared_oversized_body_is_never_read(small_app: FastAPI) -> None:
    parts = [b"x" * 1024] * 8
    headers = [BEARER, ("Content-Type", "application/json"), ("Content-Length", "8192")]
    status, payload, read = _drive(small_app, "POST", "/api/v1/jobs", headers, parts)
    assert (status, read) == (413, 0), payload
    _names_the_cap(_is_error(payload, "http"), SMALL_CAP)


def test_a_streamed_body_stops_being_read_past_the_cap(small_app: FastAPI) -> None:
    parts = [b"x" * 1024] * 64  # no Content-Length: counted as it arrives
    headers = [BEARER, ("Content-Type", "application/json")]
    status, payload, read = _drive(small_app, "POST", "/api/v1/jobs", headers, parts)
    assert status == 413, payload
    assert read == SMALL_CAP // 1024 + 1  # the first part past the cap, and no more
    _names_the_cap(_is_error(payload, "http"), SMALL_CAP)


def test_a_body_at_the_cap_is_read(small_app: FastAPI) -> None:
    parts = [b"x" * 1024] * (SMALL_CAP // 1024)
    headers = [BEARER, ("Content-Type", "application/json")]
    status, payload, read = _drive(small_app, "POST", "/api/v1/jobs", headers, parts)
    assert (status, read) == (422, len(parts)), payload  # read in full: not JSON
    assert payload["error"]["field"] == "body", payload


def test_a_cap_below_one_byte_is_refused(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home", fake_gpus="1x80GiB")
    with pytest.raises(ConfigError, match="DANLU_MAX_BODY_BYTES must be a positive"):
        create_app(settings, start_loops=False, max_body_bytes=0)


def test_the_default_cap_holds_a_full_batch_of_the_largest_metric_records() -> None:
    record = {"step": 10**15, "time": 1e9, "note": "x" * (MAX_RECORD_BYTES - 12)}
    body = json.dumps({"metrics": [record] * MAX_BATCH}).encode()
    assert len(body) <= MAX_BODY_BYTES // 2  # twice over, whatever JSON spacing a client uses


def test_a_full_batch_of_the_largest_metric_records_is_accepted(live: Live) -> None:
    with live.client() as c:
        job = submit(c, spec("big-metrics", "print(1)"))
        note = "x" * (MAX_RECORD_BYTES - 12)  # {"note": "..."} is the record's limit
        records = [{"step": i, "note": note} for i in range(MAX_BATCH)]
        response = c.post(f"/jobs/{job['id']}/metrics", json={"metrics": records})
        assert response.status_code == 200, response.text[:500]
        assert response.json()["accepted"] == MAX_BATCH


# --- no token: 401 before the body ---------------------------------------------------------

TOKEN_ROUTES = {
    "submit-job": ("POST", "/api/v1/jobs"),
    "metrics": ("POST", "/api/v1/jobs/abcd1234/metrics"),
    "sweep": ("POST", "/api/v1/sweeps"),
    "project": ("PUT", "/api/v1/projects/p"),
    "user": ("POST", "/api/v1/users"),
    "cordon": ("POST", "/api/v1/cluster/nodes/node-0/cordon"),
}


@pytest.mark.parametrize("route", list(TOKEN_ROUTES.values()), ids=list(TOKEN_ROUTES))
def test_no_token_is_401_before_the_body_is_sent(live: Live, route: tuple[str, str]) -> None:
    method, path = route
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: danlu\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000000"
    )
    status, headers, payload = _raw(live, head)  # not one byte of the body is sent
    assert status == 401, payload
    assert headers.get("www-authenticate") == "Bearer", headers
    assert headers.get("connection") == "close", headers
    assert "Authorization: Bearer" in _is_error(payload, "AuthError")


NO_BEARER = {
    "none": {},
    "basic": {"Authorization": "Basic YWRtaW46YWRtaW4="},
    "bearer-without-token": {"Authorization": "Bearer"},
}


@pytest.mark.parametrize("headers", list(NO_BEARER.values()), ids=list(NO_BEARER))
def test_malformed_json_with_no_token_is_401(live: Live, headers: dict[str, str]) -> None:
    response = httpx.post(
        f"{live.url}/api/v1/jobs",
        content=b"[1, 2,",
        headers={"Content-Type": "application/json", **headers},
        timeout=30,
    )
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in _is_error(response.json(), "AuthError")


def test_a_token_request_is_unchanged(live: Live) -> None:
    with live.client() as c:
        assert submit(c, spec("fine", "print(1)"))["name"] == "fine"
        bad = c.post("/jobs", content=b"[1, 2,", headers={"Content-Type": "application/json"})
        assert bad.status_code == 422, bad.text
        assert bad.json()["error"] == {
            "type": "SpecError",
            "field": "body",
            "message": "the body is not valid JSON",
        }
        unknown = httpx.post(
            f"{live.url}/api/v1/jobs",
            json={},
            headers={"Authorization": "Bearer dl_no_such_token"},
            timeout=30,
        )
        assert unknown.status_code == 401, unknown.text
        assert "unknown or revoked" in _is_error(unknown.json(), "AuthError")


PUBLIC = {
    "health": ("/api/v1/health", 200),
    "root": ("/", 307),
    "dashboard-no-slash": ("/dashboard", 307),
    "dashboard": ("/dashboard/", 200),
    "dashboard-file": ("/dashboard/app.js", 200),
    "dashboard-unknown-file": ("/dashboard/secret.txt", 404),
    "prometheus": ("/metrics", 200),
    "openapi": ("/api/v1/openapi.json", 200),
    "docs": ("/api/v1/docs", 200),
    "unknown-route": ("/api/v1/no-such-route", 404),
}


@pytest.mark.parametrize("case", list(PUBLIC.values()), ids=list(PUBLIC))
def test_public_routes_need_no_token(live: Live, case: tuple[str, int]) -> None:
    path, expected = case
    response = httpx.get(f"{live.url}{path}", follow_redirects=False, timeout=30)
    assert response.status_code == expected, response.text[:300]


def test_a_wrong_method_on_a_public_route_is_still_405(live: Live) -> None:
    response = httpx.post(f"{live.url}/api/v1/health", content=b"{}", timeout=30)
    assert response.status_code == 405, response.text


def test_the_routes_without_a_token_are_the_public_ones(small_app: FastAPI) -> None:
    routers = [admin.router, dashboard.router, events.router, jobs.router, sweeps.router]
    routes = [route for router in [*routers, webhooks.router] for route in router.routes]
    routes += [route for route in small_app.routes if isinstance(route, APIRoute)]
    public = sorted(str(getattr(route, "path", "")) for route in routes if not needs_token(route))
    assert public == ["/", "/dashboard", "/dashboard/", "/dashboard/{name}", "/health", "/metrics"]
    assert not needs_token(None)
