"""The replies of the danlu REST API as the client reads them: a JSON body of the shape
the endpoint answers (an object, an array), else :class:`~danlu.client.errors.ServerError`
naming the request and what came instead: a reply that is not JSON, or JSON of another
shape (a proxy's page, a server of another version in the way), never a raw ``TypeError``,
``KeyError`` or ``ValueError`` in the caller."""

from __future__ import annotations

from typing import Any

import httpx

from danlu.client.errors import ServerError

_SHAPE_NAMES: dict[type[Any], str] = {dict: "a JSON object", list: "a JSON array"}


def json_body(response: httpx.Response) -> Any:
    """The JSON body of ``response``; :class:`ServerError` naming the request when it is not
    JSON (or nested deeper than Python parses)."""
    try:
        return response.json()
    except (ValueError, RecursionError):
        raise malformed(response, f"not JSON: {response.text[:200]!r}") from None


def malformed(response: httpx.Response, what: str) -> ServerError:
    """:class:`ServerError` for a reply that is JSON but not what the API answers, naming
    the request (``GET /api/v1/jobs: ...``)."""
    method, path = response.request.method, response.request.url.path
    return ServerError(response.status_code, "http", None, f"{method} {path}: {what}", method, path)


def of_shape(response: httpx.Response, value: Any, shape: type[Any]) -> Any:
    """``value`` (part of ``response``'s reply) when it is of ``shape`` (``dict`` or
    ``list``), else :func:`malformed`."""
    if not isinstance(value, shape):
        got = "null" if value is None else type(value).__name__
        raise malformed(response, f"expected {_SHAPE_NAMES[shape]}, got {got}")
    return value


def shaped(response: httpx.Response, shape: type[Any]) -> Any:
    """The JSON body of ``response`` when it is of ``shape`` (``dict`` or ``list``)."""
    return of_shape(response, json_body(response), shape)


def records(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON body of ``response`` when it is an array of objects (every list the API
    answers is one)."""
    return [dict(of_shape(response, item, dict)) for item in shaped(response, list)]


def header_count(response: httpx.Response, name: str) -> int | None:
    """The whole number in ``response``'s header ``name``; None when it is missing or not
    ASCII digits (``str.isdigit`` alone takes ``"²"``, which ``int()`` refuses)."""
    value = response.headers.get(name, "")
    return int(value) if value.isascii() and value.isdigit() else None
