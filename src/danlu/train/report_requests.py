"""The requests :class:`~danlu.train.report.MetricsReporter` sends: each record as a line of
JSON, a request's body and ``Idempotency-Key`` (kept as it is while it may have been stored,
derived from the whole's when it is cut), and the checks of the HTTP answer (no redirect
followed, a 2xx that is the API's reply, the record a 422 refused). See
:mod:`danlu.train.report` for how they are shipped.
"""

from __future__ import annotations

import email.message
import hashlib
import json
import math
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from danlu.core.errors import DanluError

_REFUSED_RECORD = re.compile(r"metrics\.(\d+)(?:\.(.*))?", re.DOTALL)
"""The field of a 422 that names one record of the request: ``metrics.<i>[.<name>]``."""

KEY_HEADER = "Idempotency-Key"
"""The header naming a request, so that the API stores a request sent again only once."""

_KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""What the API takes as an ``Idempotency-Key`` (docs/api.md)."""

_PROXY_HINT = (
    "is DANLU_API_URL the control plane's address (with https:// behind a TLS proxy, and not "
    "a login page's)?"
)
"""The likely fix for an answer that is not the API's."""


def _new_key() -> str:
    """A random ``Idempotency-Key`` (32 hex digits: what the API takes, docs/api.md)."""
    return uuid.uuid4().hex


def _derived_key(key: str, index: int | str) -> str:
    """The key of request ``key`` less its record ``index`` (one the server refused), or of
    its half ``"1/2"`` or ``"2/2"`` (it was too large): a new request, whose key follows
    from the old one, so that a resumed run sending the old request again
    (:meth:`~danlu.train.report.MetricsReporter.resend`), refused or split the same way,
    sends the rest under the same keys as the first time."""
    return hashlib.sha256(f"{key}-{index}".encode()).hexdigest()[:32]


class _NotTheApi(DanluError):
    """Something other than danlu's API answered a POST: a redirect, or a 2xx whose body is
    not the API's reply. The records are kept, as for a network error."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: urllib would re-send a POST answered 301, 302 or 303 as a GET,
    without its body, and the GET's 200 would pass for the records stored. The 3xx is then
    an :class:`urllib.error.HTTPError`."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: email.message.Message,
        newurl: str,
    ) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)
"""urllib's usual opener (proxies from the environment, HTTPS) that follows no redirect."""


def _redirected(exc: urllib.error.HTTPError) -> _NotTheApi:
    """The failure a 3xx answering a POST is."""
    where = exc.headers.get("Location") if exc.headers is not None else None
    exc.close()
    return _NotTheApi(
        f"the server redirected the POST (HTTP {exc.code}) to {where or 'no address'}, and a "
        f"redirect is never followed (it would re-send the POST as a GET without its "
        f"records); {_PROXY_HINT}"
    )


def _check_reply(status: int, content_type: str, reply: bytes) -> None:
    """Raise :class:`_NotTheApi` unless ``reply`` is the API's answer to a metrics POST: a
    JSON object with an integer ``accepted``."""
    try:
        answer = json.loads(reply)
    except (ValueError, UnicodeDecodeError):
        answer = None
    accepted = answer.get("accepted") if isinstance(answer, dict) else None
    if isinstance(accepted, int) and not isinstance(accepted, bool):
        return
    shown = reply[:80].decode("utf-8", "replace") + ("..." if len(reply) > 80 else "")
    raise _NotTheApi(
        f"HTTP {status} with {content_type or 'no content type'} {shown!r}, which is not "
        f"danlu's API's reply {{\"accepted\": n, ...}}; {_PROXY_HINT}"
    )


@dataclass
class _Request:
    """One request's records, their JSON lines (the body, in order) and its key. A request
    that failed is kept as it is and sent again with its key: the server may have stored
    it. Its records change only when one is dropped
    (:meth:`~danlu.train.report.MetricsReporter._ship`), and its key with them."""

    records: list[dict[str, Any]]
    lines: list[str]
    key: str = field(default_factory=_new_key)

    def pending(self) -> dict[str, Any]:
        """The request as a checkpoint keeps it (plain data: :meth:`restored` reads it)."""
        return {"key": self.key, "lines": list(self.lines)}

    @staticmethod
    def restored(item: Any) -> _Request | None:
        """The request :meth:`pending` wrote; ``None`` when ``item`` is not one."""
        if not isinstance(item, Mapping):
            return None
        key, lines = item.get("key"), item.get("lines")
        if not isinstance(key, str) or not _KEY.fullmatch(key) or not isinstance(lines, list):
            return None
        try:
            records = [json.loads(line) for line in lines]
        except (TypeError, ValueError):
            return None
        if not lines or not all(isinstance(r, dict) for r in records):
            return None
        return _Request(records, list(lines), key)


def _after(record: dict[str, Any], step: int) -> bool:
    """Whether ``record`` is the record of a step after ``step``."""
    found = record.get("step")
    return isinstance(found, int) and not isinstance(found, bool) and found > step


def _body(lines: list[str]) -> bytes:
    """The body of a request of ``lines`` (records as JSON): the same lines, the same body."""
    return ('{"metrics": [' + ", ".join(lines) + "]}").encode()


def _finite(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with NaN and infinities as null: JSON has no such numbers (the API stores
    them as null anyway)."""
    if all(not isinstance(v, float) or math.isfinite(v) for v in record.values()):
        return record
    return {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()
    }


def _plain(value: Any) -> Any:
    """A value ``json`` cannot write as it is: a NumPy or torch scalar as its number (NaN as
    null), anything else as its text."""
    item = getattr(value, "item", None)
    if callable(item):
        try:
            number = item()
        except (TypeError, ValueError, RuntimeError):  # not a one-element value
            return str(value)
        if isinstance(number, float) and not math.isfinite(number):
            return None
        return number
    return str(value)


def _encode(record: Any) -> str:
    """``record`` as one line of JSON (NaN as null, NumPy and torch scalars as numbers);
    ``TypeError``, ``ValueError`` or ``RecursionError`` when it cannot be written (a nested
    NaN, a value that holds itself, a record that is not a mapping)."""
    if not isinstance(record, Mapping):
        raise TypeError(f"a metric record must be a dict, not {type(record).__name__}")
    return json.dumps(_finite(dict(record)), allow_nan=False, default=_plain)


def _refused_record(exc: urllib.error.HTTPError, count: int) -> tuple[int, str, str] | None:
    """The record a 422 refused, of a request of ``count``: its index, the field within it
    (``""``: the record itself) and the server's message; ``None`` when the refusal names
    no record of the request (the request as a whole, or an unreadable answer)."""
    if exc.code != 422:
        return None
    try:
        error = json.loads(exc.read() or b"{}")["error"]
        field, message = error["field"], str(error["message"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # not the API's answer
        return None
    match = _REFUSED_RECORD.fullmatch(field) if isinstance(field, str) else None
    if match is None or int(match[1]) >= count:
        return None
    return int(match[1]), match[2] or "", message
