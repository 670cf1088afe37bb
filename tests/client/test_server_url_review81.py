"""Where the client is told the server is: a URL holding a user name and password (httpx sent
them as Basic auth in place of the API token, and the password showed in every error), a
query or a fragment (every request's path went into it) is a ConfigError that never shows
the password; proxy or CA settings of the environment httpx cannot use are a ConfigError, not
a traceback; a ``server.json`` pid past any there can be is a server that is not running."""

from __future__ import annotations

import importlib.util
import json
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from local_http import serving

from danlu.client import Client, NoServerError, ServerUnavailable, find_server
from danlu.core.errors import ConfigError

SECRET = "s3cret-pw"


class _Health(BaseHTTPRequestHandler):
    """A server whose ``/api/v1/health`` answers ``ok`` to the API token only, keeping the
    Authorization of each request."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        type(self).seen.append(auth)
        ok = self.path == "/api/v1/health" and auth == "Bearer tok"
        body = json.dumps({"status": "ok"} if ok else {"detail": "no"}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def port() -> Iterator[int]:
    _Health.seen = []
    with serving(_Health) as port:
        yield port


def test_the_plain_url_reaches_the_server_with_the_token(port: int) -> None:
    with Client(f"http://127.0.0.1:{port}/api/v1/", "tok") as client:
        assert client.health() == {"status": "ok"}
    assert _Health.seen == ["Bearer tok"]


def test_a_url_with_a_password_is_refused_without_showing_it(port: int) -> None:
    with pytest.raises(ConfigError, match="user name, password") as caught:
        Client(f"http://bob:{SECRET}@127.0.0.1:{port}", "tok")
    assert SECRET not in str(caught.value)
    assert "***@127.0.0.1" in str(caught.value)
    assert _Health.seen == []  # nothing sent


@pytest.mark.parametrize("tail", ["/?x=1", "?x=1", "/#jobs", "#", "/api/v1?x"])
def test_a_url_with_a_query_or_fragment_is_refused(port: int, tail: str) -> None:
    with pytest.raises(ConfigError, match="query or fragment"):
        Client(f"http://127.0.0.1:{port}{tail}", "tok")
    assert _Health.seen == []


@pytest.mark.parametrize(
    "url",
    [
        f"ftp://bob:{SECRET}@127.0.0.1:1",
        f"http://bob:{SECRET}@[::1",
        f"bob:{SECRET}@h",
        f"http://bob:{SECRET}/x@127.0.0.1:1",  # a '/', '?' or '#' left unencoded in it
        f"http://bob:{SECRET}#x@127.0.0.1:1",
    ],
)
def test_a_url_that_is_no_server_does_not_show_its_password(url: str) -> None:
    with pytest.raises(ConfigError, match="server URL") as caught:
        Client(url, "tok")
    assert SECRET not in str(caught.value)


def test_from_home_does_not_show_the_password_of_a_url(tmp_path: Path) -> None:
    # refused as a URL with a password before the (missing) API token is looked for
    with pytest.raises(ConfigError, match="user name, password") as caught:
        Client.from_home(tmp_path, url=f"http://bob:{SECRET}@127.0.0.1:1")
    assert SECRET not in str(caught.value)


def test_an_unreachable_server_is_named_without_a_password() -> None:
    # the old client took such a URL and said "cannot reach ... http://bob:PASSWORD@..."
    with pytest.raises((ConfigError, ServerUnavailable)) as caught:
        Client(f"http://bob:{SECRET}@127.0.0.1:1", "tok").health()
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://bob:pw@h:1/x", "http://***@h:1/x"),
        ("bob@h", "***@h"),
        ("http://bob:pa/ss@h:1", "http://***@h:1"),  # a '/' left unencoded in the password
        ("http://h:1/a@b", "http://***@b"),  # an '@' later: hidden up to it, to be safe
        ("notaurl", "notaurl"),
    ],
)
def test_shown_url_hides_the_user_part(url: str, shown: str) -> None:
    from danlu.client.discovery import shown_url  # here: the old client had none

    assert shown_url(url) == shown


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HTTPS_PROXY", "ftp://proxy.example:3128"),
        ("HTTP_PROXY", "http://proxy.example:port"),
        ("ALL_PROXY", "socks5://proxy.example:1080"),  # httpx needs socksio for it
        ("SSL_CERT_FILE", "/nonexistent/ca.pem"),
    ],
)
def test_environment_settings_httpx_cannot_use_are_a_config_error(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    if name == "ALL_PROXY" and importlib.util.find_spec("socksio") is not None:
        pytest.skip("socksio is installed: a SOCKS proxy is one httpx can use")
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        Client("http://127.0.0.1:8470", "tok")


def test_a_pid_past_any_there_can_be_is_not_running(tmp_path: Path) -> None:
    record = {"url": "http://127.0.0.1:8470", "pid": 2**64, "hostname": socket.gethostname()}
    (tmp_path / "server.json").write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(NoServerError, match="is not running"):
        find_server(tmp_path)
