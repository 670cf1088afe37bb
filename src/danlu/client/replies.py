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


_MAX_HEADER_COUNT = 2**63 - 1
"""The largest count a header may carry: a byte offset or a row id the server keeps in a
64-bit integer."""


def header_count(response: httpx.Response, name: str) -> int | None:
    """The whole number in ``response``'s header ``name``; None when it is missing or not
    ASCII digits (``str.isdigit`` alone takes ``"²"``, which ``int()`` refuses).
    :func:`malformed` (a :class:`ServerError` naming the request and the header) when the
    number is beyond a 64-bit count: more than 4,300 digits raised ``int()``'s bare
    ValueError, and a server sends no offset or cursor that large."""
    value = response.headers.get(name, "")
    if not (value.isascii() and value.isdigit()):
        return None
    digits = value.lstrip("0")
    if len(digits) > len(str(_MAX_HEADER_COUNT)) or int(digits or "0") > _MAX_HEADER_COUNT:
        shown = value if len(value) <= 40 else f"{value[:20]}...({len(value)} digits)"
        raise malformed(
            response,
            f"header {name} is {shown}, beyond a 64-bit count (at most {_MAX_HEADER_COUNT})",
        )
    return int(digits or "0")


def next_log_offset(response: httpx.Response, name: str, offset: int, size: int) -> int:
    """The next offset of a log read at ``offset`` that brought ``size`` bytes (more than
    none): ``response``'s header ``name``; :func:`malformed`, saying the log cannot be read
    on, when it is missing (a proxy's page, another server in the way) or not past
    ``offset``."""
    next_offset = header_count(response, name)
    if next_offset is None:
        raise malformed(
            response,
            f"{size} bytes without a {name} header of ASCII digits: it (or a proxy in front "
            "of it) is not a danlu server of this version, so the log cannot be read past "
            "them; check that the URL names a danlu server",
        )
    if next_offset <= offset:
        raise malformed(
            response,
            f"{size} bytes at offset {offset} with a {name} of {next_offset}, not past it: "
            "the log cannot be read on; check that the URL names a danlu server of this "
            "version",
        )
    return next_offset
