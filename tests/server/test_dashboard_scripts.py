"""The dashboard's script is split by concern into a few classic scripts of its folder, loaded
in order by the page (``app.js``, which starts it, last; no build step): every one is served,
with the JavaScript type and the same strict headers as the page, none writes markup, and the
folder holds no script the page does not load or the server does not serve; none grows past
the 800 lines a Python module may have.

Without a browser: the page's loading them all (no 404, no script error) is what every browser
test of ``test_dashboard`` checks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import httpx
import pytest
from helpers import Live, live_server

from danlu.server.routes.dashboard import FILES

_SCRIPT_TAG = re.compile(r'<script src="([\w.-]+)"></script>')
MAX_LINES = 800  # as tests/arch holds a Python module to: past it, split the script by concern


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as server:
        yield server


def _loaded(live: Live) -> list[str]:
    """The scripts the page loads, in its order."""
    page = httpx.get(f"{live.url}/dashboard/").text
    assert "<script>" not in page  # no inline script: the policy would block it
    return _SCRIPT_TAG.findall(page)


def test_every_script_the_page_loads_is_served_strictly_and_writes_no_markup(live: Live) -> None:
    scripts = _loaded(live)
    assert len(scripts) > 1 and scripts[-1] == "app.js"  # app.js starts the page: last
    for name in scripts:
        response = httpx.get(f"{live.url}/dashboard/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"] == "text/javascript; charset=utf-8", name
        assert response.headers["content-security-policy"].startswith("default-src 'none'")
        assert response.headers["x-frame-options"] == "DENY", name
        text = response.text
        assert text.count('"use strict";') == 1, name
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text, name
        assert "eval(" not in text and "document.write" not in text, name
        assert len(text.splitlines()) <= MAX_LINES, f"{name}: split it by concern"


def test_the_folder_s_scripts_the_page_loads_and_the_server_serves_are_the_same(
    live: Live,
) -> None:
    folder = resources.files("danlu.server") / "dashboard"
    scripts = {entry.name for entry in folder.iterdir() if entry.name.endswith(".js")}
    assert scripts == {name for name in FILES if name.endswith(".js")}
    assert scripts == set(_loaded(live))
