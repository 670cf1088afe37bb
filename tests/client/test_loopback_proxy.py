"""With ``HTTP_PROXY`` set (a cluster's or a company's egress proxy) and no ``NO_PROXY``,
the client sent its requests for the server on this machine's loopback
(``http://127.0.0.1:8470``, what ``danlu up`` records) to the proxy, whose loopback is
another: a running server was ``cannot reach ... Connection refused; is it running?`` (or
the proxy's 502), and the token went to the proxy. A loopback server is now reached
directly; a server elsewhere still goes through the proxy."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest
from local_http import serving

from danlu.client import Client
from danlu.client.discovery import loopback_pattern


class Answers(BaseHTTPRequestHandler):
    """Answers every GET with ``{"status": "ok", "by": NAME}``, keeping each request line's
    target (a proxy is asked for an absolute URL)."""

    name: ClassVar[str] = "server"
    seen: ClassVar[list[str]]

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.path)
        body = f'{{"status": "ok", "by": "{self.name}"}}'.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(Answers):
    name = "server"
    seen: ClassVar[list[str]] = []


class Proxy(Answers):
    name = "proxy"
    seen: ClassVar[list[str]] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    Server.seen.clear()
    Proxy.seen.clear()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_loopback_server_is_reached_without_the_environments_proxy(
    monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    with serving(Proxy) as proxy_port, serving(Server) as port:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy_port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        with Client(f"http://{host}:{port}", "tok") as client:
            assert client.health() == {"status": "ok", "by": "server"}
    assert Server.seen == ["/api/v1/health"] and Proxy.seen == []


def test_a_server_elsewhere_still_goes_through_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    with serving(Proxy) as proxy_port:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        with Client("http://danlu.example:8470", "tok") as client:
            assert client.health() == {"status": "ok", "by": "proxy"}
    assert Proxy.seen == ["http://danlu.example:8470/api/v1/health"]


@pytest.mark.parametrize(
    ("base", "pattern"),
    [
        ("http://127.0.0.1:8470", "all://127.0.0.1"),
        ("http://127.1.2.3", "all://127.1.2.3"),
        ("http://[::1]:8470", "all://[::1]"),
        ("https://LocalHost/danlu", "all://localhost"),
        ("http://node.localhost:8470", "all://node.localhost"),
        ("http://10.0.0.5:8470", None),
        ("https://danlu.example", None),
        ("http://localhost.example.com", None),
    ],
)
def test_which_hosts_are_this_machines_loopback(base: str, pattern: str | None) -> None:
    assert loopback_pattern(base) == pattern
