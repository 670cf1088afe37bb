"""The web dashboard at ``/dashboard/``: one static page (HTML, JavaScript, CSS; no build
step) that reads the REST API with the token its user pastes in. The files hold no data, so
they need no token; every byte of data comes from ``/api/v1`` with the user's own rights.

Only the files of :data:`FILES` are served (a request names a key of that table, never
a path), each with a Content-Security-Policy that allows the page's own script and style and
nothing else (no inline script, no other origin, no framing: ``X-Frame-Options`` too).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Final

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from danlu.server.errors import NotFoundError

_SCRIPT: Final = "text/javascript; charset=utf-8"
FILES: Final = {
    "index.html": "text/html; charset=utf-8",
    # the page's scripts, in the order index.html loads them (app.js, which starts it, last)
    "api.js": _SCRIPT,
    "common.js": _SCRIPT,
    "cluster.js": _SCRIPT,
    "nodes.js": _SCRIPT,
    "jobs.js": _SCRIPT,
    "tables.js": _SCRIPT,
    "detail.js": _SCRIPT,
    "app.js": _SCRIPT,
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",  # frame-ancestors' twin for browsers that lack it
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@cache
def _read(name: str) -> bytes:
    return (resources.files("danlu.server") / "dashboard" / name).read_bytes()


def _file(name: str) -> Response:
    return Response(_read(name), media_type=FILES[name], headers=HEADERS)


@router.get("/")
def root() -> RedirectResponse:
    """The dashboard."""
    return RedirectResponse("/dashboard/")


@router.get("/dashboard")
def dashboard_no_slash() -> RedirectResponse:
    """The dashboard (its files are relative to ``/dashboard/``)."""
    return RedirectResponse("/dashboard/")


@router.get("/dashboard/")
def dashboard() -> Response:
    """The dashboard's page."""
    return _file("index.html")


@router.get("/dashboard/{name}")
def dashboard_file(name: str) -> Response:
    """One of the dashboard's files; any other name is 404."""
    if name not in FILES:
        raise NotFoundError("file", name, "name")
    return _file(name)
