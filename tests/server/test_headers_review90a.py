"""The app's fixes of what its replies say:

- every response carries ``X-Content-Type-Options: nosniff``, the API's as the dashboard's
  files did alone: a job's log (``text/plain``) and the strings of a spec or a metric record
  are the submitter's bytes, which a browser must not sniff as HTML (refusals made before
  any route, the 500 and ``/metrics`` too);
- a non-admin asking for another user's tokens is told that the user itself or an admin may
  (the 403 said "this route is for admins", of a route that the user itself may use).
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from helpers import Live, live_server, spec, submit
from starlette.requests import Request

from danlu.server import app as app_module


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as server:
        yield server


def _nosniff(response: httpx.Response) -> bool:
    return response.headers.get_list("x-content-type-options") == ["nosniff"]


def test_every_reply_tells_the_browser_not_to_sniff_its_type(live: Live) -> None:
    admin = live.client()
    job = submit(admin, spec("logged", "print('<script>alert(1)</script>')"))
    assert admin.post(f"/jobs/{job['id']}/cancel").status_code == 200  # a follow ends
    anonymous = httpx.Client(base_url=f"{live.url}/api/v1", timeout=30.0)
    replies = {
        "health": anonymous.get("/health"),
        "a job": admin.get(f"/jobs/{job['id']}"),
        "a log": admin.get(f"/jobs/{job['id']}/logs"),
        "a followed log": admin.get(f"/jobs/{job['id']}/logs", params={"follow": "true"}),
        "a 401": anonymous.get("/jobs"),
        "a 404": admin.get("/jobs/nosuchjob1"),
        "a 422": admin.get("/jobs", params={"limit": 0}),
        "a NUL's 422": admin.get("/jobs", params={"name": "a\0b"}),
        "prometheus": httpx.get(f"{live.url}/metrics"),
        "the dashboard": httpx.get(f"{live.url}/dashboard/"),
    }
    assert replies["a log"].headers["content-type"].startswith("text/plain")
    assert replies["a NUL's 422"].status_code == 422
    sniffable = [what for what, reply in replies.items() if not _nosniff(reply)]
    assert sniffable == []  # the dashboard's own header kept once, not twice
    status, headers = _oversized(live)
    assert status == 413 and headers.get_all("x-content-type-options") == ["nosniff"]


def _oversized(live: Live) -> tuple[int, http.client.HTTPMessage]:
    """A POST whose ``Content-Length`` is past the body cap, its body never sent (sent, the
    server's close with the body unread could reset the connection before its 413 was
    read): the 413's status and headers."""
    address = urlsplit(live.url)
    assert address.hostname is not None and address.port is not None
    head = (
        "POST /api/v1/jobs HTTP/1.1\r\nHost: danlu\r\n"
        f"Authorization: Bearer {live.token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {33_554_432 + 1}\r\n\r\n"
    )
    with socket.create_connection((address.hostname, address.port), 30.0) as sock:
        sock.sendall(head.encode("latin-1"))
        response = http.client.HTTPResponse(sock)
        response.begin()
        response.read()
        return response.status, response.msg


def test_the_500_of_an_unexpected_error_carries_it_too() -> None:
    """Starlette sends the reply of the catch-all handler from its outermost middleware,
    outside the app's own: the handler sets the header itself."""
    request = Request({"type": "http", "method": "GET", "path": "/", "headers": []})
    reply = app_module._internal_error(request, RuntimeError("boom"))
    assert reply.status_code == 500
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert json.loads(bytes(reply.body))["error"]["type"] == "internal"


def test_a_users_tokens_refused_to_another_user_say_who_may_see_them(live: Live) -> None:
    admin = live.client()
    for name in ("bob", "carol"):
        assert admin.post("/users", json={"name": name}).status_code == 201
    token = admin.post("/users/carol/tokens", json={}).json()["token"]
    carol = live.client(token)
    for method, path in (
        ("GET", "/users/bob/tokens"),
        ("POST", "/users/bob/tokens"),
        ("DELETE", "/users/bob/tokens"),
        ("DELETE", "/users/bob/tokens/abcd1234"),
    ):
        reply = carol.request(method, path, json={} if method == "POST" else None)
        assert reply.status_code == 403, (method, path)
        message = reply.json()["error"]["message"]
        assert "for admins" not in message
        assert "'bob' or an admin" in message and "/users/carol/tokens" in message
    own = carol.get("/users/carol/tokens")
    assert own.status_code == 200 and len(own.json()) == 1
