"""Replies the danlu server never sends, as a proxy or another server in the way may: a
redirect (over real HTTP) is an ApiError, not a success whose body is read as the log or the
Job; an error body of another shape, or nested deeper than Python parses, and a success that
is not JSON are the client's documented errors naming the request; a follow answered 503
"busy" is opened again, as every other request is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import httpx
import pytest
from local_http import serving

from danlu.client import ApiError, Client, InvalidRequestError, ServerError
from danlu.client.rest import LOG_OFFSET_HEADER as LOG_OFFSET


class _Moved(BaseHTTPRequestHandler):
    """A proxy that moves every request to https (``301``, an HTML page), up to ``LIMIT``
    requests; then ``404``, so that a client reading the page as a log still stops."""

    LIMIT = 20
    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        type(self).seen.append(f"{self.command} {self.path}")
        if len(self.seen) > self.LIMIT:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        page = b"<html><body>Moved</body></html>"
        self.send_response(301)
        self.send_header("Location", f"https://danlu.example{self.path}")
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def moved() -> Iterator[str]:
    """The URL of a local server that answers every request with a redirect."""
    _Moved.seen = []
    with serving(_Moved) as port:
        yield f"http://127.0.0.1:{port}"


def test_a_redirect_is_an_api_error_not_a_removed_webhook(moved: str) -> None:
    with Client(moved, "tok") as client, pytest.raises(ApiError) as caught:
        client.remove_webhook("w1")
    assert caught.value.status == 301
    assert caught.value.type == "redirect"
    assert "https://danlu.example/api/v1/webhooks/w1" in str(caught.value)
    assert _Moved.seen == ["DELETE /api/v1/webhooks/w1"]  # not followed


def test_a_redirect_is_not_read_as_the_log(moved: str) -> None:
    with Client(moved, "tok") as client:
        with pytest.raises(ApiError) as caught:
            client.logs("j1")
        assert caught.value.type == "redirect"
        # the page was read as a log chunk again and again, each time from a further offset
        with pytest.raises(ApiError) as caught:
            list(client.read_logs("j1"))
        assert caught.value.type == "redirect"
        with pytest.raises(ApiError) as caught:
            list(client.follow_logs("j1", reconnect_delay=0))
        assert caught.value.type == "redirect"
    assert len(_Moved.seen) == 3


def _answering(status: int, body: bytes, headers: dict[str, str] | None = None) -> Client:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers=headers or {})

    return Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("loc", [None, 5, {"a": 1}])
def test_an_error_whose_loc_is_not_a_list_names_no_field(loc: Any) -> None:
    body = json.dumps({"detail": [{"loc": loc, "msg": "bad value"}]}).encode()
    with _answering(422, body) as client, pytest.raises(InvalidRequestError) as caught:
        client.health()
    assert (caught.value.field, caught.value.message) == (None, "bad value")


def test_an_error_whose_loc_is_text_is_not_spelled_out() -> None:
    body = json.dumps({"detail": [{"loc": "body", "msg": "bad value"}]}).encode()
    with _answering(422, body) as client, pytest.raises(InvalidRequestError) as caught:
        client.health()
    assert caught.value.field is None  # not "b.o.d.y"


DEEP = b"[" * 100_000  # a cut-off body nested past what json.loads recurses into


@pytest.mark.parametrize("status", [200, 201, 500, 422])
def test_a_body_nested_too_deep_is_the_documented_error(status: int) -> None:
    with _answering(status, DEEP) as client, pytest.raises(ApiError) as caught:
        client.submit({"name": "x", "command": ["true"]})
    assert caught.value.status == status
    if status < 300:
        assert isinstance(caught.value, ServerError)
        assert "POST /api/v1/jobs: not JSON" in str(caught.value)


@pytest.mark.parametrize("status", [200, 204])
def test_a_success_that_is_not_json_names_the_request(status: int) -> None:
    body = b"" if status == 204 else b"<html>proxy</html>"
    with _answering(status, body) as client, pytest.raises(ServerError) as caught:
        client.cancel("j1")
    assert str(caught.value).startswith("POST /api/v1/jobs/j1/cancel: not JSON")
    assert (caught.value.method, caught.value.path) == ("POST", "/api/v1/jobs/j1/cancel")


def test_a_follow_answered_busy_is_opened_again() -> None:
    follows: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs") and request.url.params.get("follow"):
            follows.append(int(request.url.params["offset"]))
            if len(follows) == 1:
                body = {"error": {"type": "busy", "field": None, "message": "busy, retry"}}
                return httpx.Response(503, json=body, headers={"Retry-After": "0"})
            return httpx.Response(200, content=b"hello\n")
        if request.url.path.endswith("/logs"):  # read once the job has ended: all there
            offset = int(request.url.params["offset"])
            return httpx.Response(200, content=b"hello\n"[offset:], headers={LOG_OFFSET: "6"})
        state = "RUNNING" if len(follows) < 2 else "SUCCEEDED"
        return httpx.Response(200, json={"id": "j1", "state": state})

    transport = httpx.MockTransport(handler)
    with Client("http://danlu.test", "tok", transport=transport) as client:
        assert "".join(client.follow_logs("j1", reconnect_delay=0)) == "hello\n"
    assert follows == [0, 0]
