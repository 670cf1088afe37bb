"""An error answer that is not a danlu server's (a reverse proxy's HTML page, another web
server at a wrong path) was shown as its raw text: ``error: <html>\\r\\n<head><title>404 Not
Found</title>...`` named neither the status nor the URL asked, so a server URL missing its
proxy's path prefix read as nonsense; and the danlu server's own 404 for a route it does not
have (the URL's path wrong) said only ``Not Found``. Each now names the request's URL and
the status and says to check the server URL; ``message`` keeps the body's text as it came."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from fastapi.testclient import TestClient
from local_http import serving

from danlu.client import AuthError, Client, GatewayError, NotFoundError, ServerError
from danlu.config import load_settings
from danlu.server.app import create_app
from danlu.server.db import Database
from danlu.server.services.users import bootstrap_admin

NGINX_404 = (
    b"<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n"
    b"<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
NGINX_502 = NGINX_404.replace(b"404 Not Found", b"502 Bad Gateway")


class Pages(BaseHTTPRequestHandler):
    """A web server at the root that is no danlu server: its own pages for every path."""

    pages: ClassVar[dict[str, tuple[int, bytes]]] = {
        "/danlu/api/v1/jobs": (404, NGINX_404),
        "/danlu/api/v1/jobs/abcd/cancel": (500, b"<html><body>Internal Server Error</body></html>"),
        "/danlu/api/v1/users/me": (401, b"<html><title>Sign in</title><body>...</body></html>"),
        "/danlu/api/v1/jobs/abcd": (502, NGINX_502),
    }

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:
        status, page = self.pages.get(self.path.partition("?")[0], (404, NGINX_404))
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    do_POST = do_GET


@pytest.fixture
def pages() -> Iterator[tuple[Client, str]]:
    """A client of ``http://127.0.0.1:PORT/danlu/`` over real HTTP, and that base URL."""
    with serving(Pages) as port:
        base = f"http://127.0.0.1:{port}/danlu"
        with Client(base + "/", "tok") as client:
            yield client, base


def test_a_proxys_404_page_names_the_status_and_the_url(pages: tuple[Client, str]) -> None:
    client, base = pages
    with pytest.raises(NotFoundError) as caught:
        client.list_jobs(limit=5)
    text = str(caught.value)
    assert text.startswith(f"GET {base}/api/v1/jobs: ")
    assert "answered 404 Not Found" in text and "(404 Not Found)" in text
    assert "<" not in text and "\n" not in text and "\r" not in text  # no raw HTML
    assert "--url" in text and "DANLU_URL" in text  # what to check
    assert caught.value.message == NGINX_404.decode().strip()  # the body's text, as it came
    assert caught.value.url == f"{base}/api/v1/jobs"  # no query
    assert caught.value.status == 404


def test_an_auth_proxys_page_is_named_so_not_printed(pages: tuple[Client, str]) -> None:
    client, base = pages
    with pytest.raises(AuthError) as caught:
        client.me()
    text = str(caught.value)
    assert text.startswith(f"GET {base}/api/v1/users/me: ")
    assert "401 Unauthorized" in text and "(Sign in)" in text and "<" not in text


def test_a_foreign_500_to_a_post_names_the_url_and_still_says_to_check(
    pages: tuple[Client, str],
) -> None:
    client, base = pages
    with pytest.raises(ServerError) as caught:
        client.cancel("abcd")
    text = str(caught.value)
    assert text.startswith(f"POST {base}/api/v1/jobs/abcd/cancel: ")
    assert "500 Internal Server Error" in text and "<" not in text
    assert "may or may not have been carried out" in text
    back = pickle.loads(pickle.dumps(caught.value))
    assert str(back) == text and back.url == caught.value.url


def test_a_proxys_502_page_is_shown_as_its_words_on_one_line(
    pages: tuple[Client, str],
) -> None:
    client, base = pages
    with pytest.raises(GatewayError) as caught:
        client.get_job("abcd")
    text = str(caught.value)
    assert text.startswith(f"GET {base}/api/v1/jobs/abcd: a proxy in front of the danlu server")
    assert "answered 502 (502 Bad Gateway)" in text and "try again" in text
    assert "<" not in text and "\n" not in text
    assert caught.value.message == NGINX_502.decode().strip()


@pytest.fixture
def wrong_path(tmp_path: Path) -> Iterator[Client]:
    """A client of the real API app given a URL with a path it is not served under."""
    settings = load_settings(home=tmp_path, fake_gpus="1x80GiB")
    app = create_app(settings, start_loops=False)
    db = Database(settings.db_url)
    with db.session() as session:
        token = bootstrap_admin(session, settings.admin_token_path)
    db.dispose()
    assert token is not None
    with TestClient(app) as http:

        def forward(request: httpx.Request) -> httpx.Response:
            answer = http.request(
                request.method, str(request.url), headers=request.headers, content=request.content
            )
            return httpx.Response(
                answer.status_code, headers=answer.headers, content=answer.content
            )

        transport = httpx.MockTransport(forward)
        with Client("http://danlu.test/danlu", token, transport=transport) as client:
            yield client


def test_the_servers_404_for_a_route_it_lacks_names_the_url(wrong_path: Client) -> None:
    with pytest.raises(NotFoundError) as caught:
        wrong_path.list_jobs()
    error = caught.value
    assert (error.status, error.type, error.message) == (404, "http", "Not Found")
    text = str(error)
    assert text.startswith("GET http://danlu.test/danlu/api/v1/jobs: 404 Not Found")
    assert "no such route" in text and "--url" in text


def test_the_servers_own_not_found_of_a_job_is_unchanged() -> None:
    """A 404 naming what is missing (a job) says only that, as before."""
    body = {"error": {"type": "NotFoundError", "field": "id", "message": "job 'zzzz' not found"}}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json=body)

    transport = httpx.MockTransport(handler)
    with (
        Client("http://danlu.test", "tok", transport=transport) as c,
        pytest.raises(NotFoundError) as caught,
    ):
        c.get_job("zzzz")
    assert str(caught.value) == "id: job 'zzzz' not found"
