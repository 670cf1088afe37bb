"""A token read from a file with its line break (``Path("token").read_text()``, a file
written on Windows: ``\\r\\n``) was refused by :class:`Client` as holding whitespace, though
``danlu``'s ``--token`` / ``DANLU_TOKEN`` and the home's ``admin.token`` are read without
it: the client sends the token without the whitespace around it, as they do. Whitespace
within a token, or a token of whitespace alone, is still refused before anything is sent."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest
from local_http import serving

from danlu.client import Client
from danlu.core.errors import ConfigError


class Echo(BaseHTTPRequestHandler):
    """Answers every GET with ``{}``, keeping the Authorization header each came with."""

    seen: ClassVar[list[str | None]] = []

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:
        Echo.seen.append(self.headers.get("Authorization"))
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("given", ["tok-123\n", "tok-123\r\n", " tok-123\t"])
def test_a_token_with_whitespace_around_it_is_sent_without_it(given: str) -> None:
    Echo.seen.clear()
    with serving(Echo) as port, Client(f"http://127.0.0.1:{port}", given) as client:
        assert client.health() == {"status": "ok"}
        assert client.token == "tok-123"
    assert Echo.seen == ["Bearer tok-123"]


@pytest.mark.parametrize("given", ["tok 123", "tok-1\n23", " \r\n"])
def test_whitespace_within_a_token_is_still_refused(given: str) -> None:
    with pytest.raises(ConfigError, match="whitespace"):
        Client("http://127.0.0.1:9", given)
