"""The real API app in this process (FastAPI's test transport) on a SQLite store in a fresh
home, for the CLI tests that need the server's own answers rather than canned ones."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from rich.console import Console

from danlu.cli import jobs as jobs_cli
from danlu.client import Client
from danlu.config import load_settings
from danlu.server.app import create_app
from danlu.server.db import Database
from danlu.server.services.users import bootstrap_admin


@contextmanager
def real_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int = 200) -> Iterator[str]:
    """The API app on a fresh home in ``tmp_path`` (one fake 80 GiB GPU), which every
    command reaches with the token it is given (``--token``), the admin's when none is; the
    job commands print to a console ``width`` columns wide. Yields the admin's token."""
    settings = load_settings(home=tmp_path, fake_gpus="1x80GiB")
    app = create_app(settings, start_loops=False)
    db = Database(settings.db_url)
    with db.session() as session:
        admin_token = bootstrap_admin(session, settings.admin_token_path)
    db.dispose()
    assert admin_token is not None
    with TestClient(app) as http:

        def forward(request: httpx.Request) -> httpx.Response:
            answer = http.request(
                request.method, str(request.url), headers=request.headers, content=request.content
            )
            status, headers = answer.status_code, answer.headers
            return httpx.Response(status, headers=headers, content=answer.content)

        def factory(home: Path | None, url: str | None, token: str | None) -> Client:
            transport = httpx.MockTransport(forward)  # to the app, in this process
            return Client("http://testserver", token or admin_token, transport=transport)

        monkeypatch.setattr(jobs_cli, "client_factory", factory)
        monkeypatch.setattr(jobs_cli, "console", Console(width=width))
        yield admin_token
