"""What the :class:`~danlu.client.rest.Client` sends: URL path segments (:func:`seg`), JSON
bodies checked before they are sent (:func:`json_content`, :func:`metric_records`), query
parameters (:func:`clean`, :func:`listed`) and the API token (:func:`check_token`); and when a busy
server's answer is tried again (:func:`busy`, :func:`retry_after`)."""

from __future__ import annotations

import datetime
import email.utils
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from danlu.client.discovery import API_PREFIX
from danlu.client.errors import ApiError, InvalidRequestError
from danlu.core.errors import ConfigError, SpecError
from danlu.core.spec import JobSpec
from danlu.core.values import quoted


def spec_body(spec: JobSpec | Mapping[str, Any]) -> dict[str, Any]:
    """The body of a job submission: ``spec``, a :class:`JobSpec` or a mapping of its
    fields (:func:`mapping_body`)."""
    if isinstance(spec, JobSpec):
        return spec.model_dump(mode="json", exclude_defaults=True) | {"name": spec.name}
    return mapping_body(spec, "spec")


def mapping_body(spec: Mapping[str, Any], field: str) -> dict[str, Any]:
    """``spec``, the argument ``field``, as the JSON object a request sends; a
    :class:`SpecError` naming ``field`` when it is no mapping (``submit(None)`` was a bare
    TypeError, ``submit("name: x")``, the text of a spec, a bare ValueError of ``dict()``)."""
    if not isinstance(spec, Mapping):
        raise SpecError(
            field,
            f"must be a mapping of the spec's fields (got {type(spec).__name__} "
            f"{quoted(spec)}); read a spec file with danlu.core.spec.load_spec_data first",
        )
    return dict(spec)


def check_offset(offset: int) -> int:
    """``offset``, a byte offset into a job's log, when it is a whole number 0 or more; a
    :class:`SpecError` naming ``offset`` otherwise (``"0"`` was a bare TypeError once the
    first chunk came, ``True`` went as ``true``, ``-1`` was the server's 422)."""
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise SpecError(
            "offset", f"must be a whole number of bytes, 0 or more (got {quoted(offset)})"
        )
    return offset


def seg(value: str, field: str) -> str:
    """``value``, the argument ``field`` of a client method (``job``, ``user``, ``node``),
    as one URL path segment: ``/``, ``..`` and the like cannot change the route; an id or
    name that is not text (None, a number: a bare TypeError) or that is empty, ``.``,
    ``..`` or holds a ``/`` is a :class:`SpecError` naming ``field`` (every one was named
    ``id``, a user's or node's name too)."""
    if not isinstance(value, str):
        raise SpecError(field, f"{quoted(value)} is not a valid id or name: give it as text")
    check_unicode(value, field)
    if value in ("", ".", "..") or "/" in value:
        raise SpecError(
            field,
            f"{quoted(value)} is not a valid id or name: it cannot be empty, "
            "'.' or '..', nor hold a '/'",
        )
    return quote(value, safe="")


def busy(response: httpx.Response, error: ApiError) -> bool:
    """A 503 from a danlu server whose database was busy: the request changed nothing."""
    return response.status_code == 503 and error.type == "busy"


MIN_RETRY_AFTER = 0.1
"""The shortest pause (seconds) before a request a busy server answered is sent again: a
``Retry-After`` of 0 (or a date gone by) sent every retry back to back, all within the
moment the database was busy, as :data:`~danlu.client.waits.MIN_POLL` floors a wait's poll."""
MAX_RETRY_AFTER = 5.0
"""The longest pause (seconds) before a request a busy server answered is sent again."""


def retry_after(response: httpx.Response) -> float:
    """How long to pause before sending again a request ``response`` answered busy: its
    ``Retry-After`` in seconds or as an HTTP date (``Wed, 21 Oct 2026 07:28:00 GMT``: the
    time until then; it was taken as 1 s whatever it said), within
    :data:`MIN_RETRY_AFTER`..:data:`MAX_RETRY_AFTER`; 1 s when it has none or none that
    reads (``nan`` too)."""
    text = response.headers.get("Retry-After", "").strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return 1.0
        if when.tzinfo is None:  # an HTTP date is in GMT; "-0000" reads as no zone
            when = when.replace(tzinfo=datetime.UTC)
        seconds = (when - datetime.datetime.now(datetime.UTC)).total_seconds()
    if math.isnan(seconds):
        return 1.0
    return min(MAX_RETRY_AFTER, max(MIN_RETRY_AFTER, seconds))


def check_token(token: str) -> None:
    """An API token goes in an HTTP header: printable ASCII without whitespace, else a
    :class:`ConfigError` naming where it came from (never echoing the secret); a token that
    is not text (a number, bytes: a bare TypeError) is refused so too, by its type."""
    if not isinstance(token, str):
        raise ConfigError(
            f"the API token must be text, not {type(token).__name__}: check --token, "
            "DANLU_TOKEN or the danlu home's admin.token"
        )
    for index, char in enumerate(token):
        if not "!" <= char <= "~":
            raise ConfigError(
                f"the API token holds {_char_name(char)} at character {index + 1}; a token is "
                "printable ASCII without spaces: check --token, DANLU_TOKEN or the danlu "
                "home's admin.token"
            )


def _char_name(char: str) -> str:
    if char.isspace():
        return f"whitespace (U+{ord(char):04X})"
    return f"{char!r} (U+{ord(char):04X})" if char.isprintable() else f"U+{ord(char):04X}"


def json_content(body: Any, method: str, path: str) -> bytes:
    """``body`` as the JSON httpx would send (UTF-8, compact), or an
    :class:`InvalidRequestError` (``status`` 0: no answer) naming the field JSON cannot hold
    (NaN, infinity, an object) or UTF-8 cannot encode (a lone surrogate: a bare
    UnicodeEncodeError), before anything is sent."""
    try:  # UnicodeEncodeError is a ValueError
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return text.encode("utf-8")
    except (ValueError, TypeError, RecursionError) as exc:
        try:
            field, problem = _unsendable(body) or (None, str(exc))
        except RecursionError:  # a body that holds itself
            field, problem = None, str(exc)
        message = f"{problem}; the request was not sent"
        where = API_PREFIX + path
        raise InvalidRequestError(0, "SpecError", field, message, method, where) from None


def _unsendable(value: Any, field: str = "") -> tuple[str | None, str] | None:
    """The dotted field of ``value`` JSON cannot hold, and why; None when it has none."""
    if isinstance(value, float) and not math.isfinite(value):
        return field or None, f"{value} is not a finite number"
    if isinstance(value, str) and (problem := _not_unicode(value)):
        return field or None, problem
    if value is None or isinstance(value, str | int | float):
        return None
    if isinstance(value, Mapping):
        items: list[tuple[Any, Any]] = list(value.items())
        for key, _ in items:
            if not isinstance(key, str | int | float | bool) and key is not None:
                return field or None, f"key {key!r} is not text"
            if isinstance(key, str) and (problem := _not_unicode(key)):
                return field or None, f"key {problem}"
    elif isinstance(value, list | tuple):
        items = list(enumerate(value))
    else:
        return field or None, f"a {type(value).__name__} is not a JSON value"
    for key, item in items:
        found = _unsendable(item, f"{field}.{key}" if field else str(key))
        if found:
            return found
    return None


def clean(params: Mapping[str, Any]) -> dict[str, Any]:
    """The query parameters ``params`` that are set (not None, not an empty list); text UTF-8
    cannot encode is a :class:`SpecError` naming its parameter (:func:`check_unicode`)."""
    for key, value in params.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                check_unicode(item, key)
    return {k: v for k, v in params.items() if v is not None and v != []}


def check_unicode(text: str, field: str) -> None:
    """A :class:`SpecError` naming ``field`` when ``text`` holds a lone surrogate, which
    UTF-8 cannot encode (Python reads bytes that are not UTF-8 in a command-line argument
    or file name so): the request failed with a bare UnicodeEncodeError as it was built."""
    problem = _not_unicode(text)
    if problem:
        raise SpecError(field, problem)


def _not_unicode(text: str) -> str | None:
    """Why ``text`` cannot be sent (its first lone surrogate), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"holds U+{ord(text[exc.start]):04X} at character {exc.start + 1}, a lone surrogate "
            "that is no Unicode text (bytes that are not UTF-8, read from an argument or a "
            "file name): write it as UTF-8 text"
        )
    return None


def listed(value: str | Sequence[str] | None, field: str) -> list[str]:
    """The names ``value``, the argument ``field``, gives where a list of them is asked for
    (states, members, job ids): one string is one name (a bare string was read character by
    character: the states ``R``, ``U``, ``N``...), None none. Anything else but a list of
    strings is a :class:`SpecError` naming ``field`` (``wait(12345)`` was a bare
    TypeError) or ``field.N`` for an entry that is not text."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping | bytes | bytearray) or not isinstance(value, Iterable):
        raise SpecError(
            field, f"must be a name or a list of names (got {type(value).__name__} {quoted(value)})"
        )
    names = list(value)
    for index, name in enumerate(names):
        if not isinstance(name, str):
            raise SpecError(f"{field}.{index}", f"{quoted(name)} is not a name: give it as text")
    return names


def metric_records(metrics: Any, method: str, path: str) -> list[dict[str, Any]]:
    """``metrics``, the records a ``method`` request of ``path`` sends, each as a dict; an
    :class:`InvalidRequestError` (``status`` 0: not sent) naming ``metrics`` when it is one
    record rather than a list of them (its keys were read as records: ``{"lr": 0.1}`` went
    as ``[{"l": "r"}]``) or not a list at all, or ``metrics.N`` for a record that is not a
    mapping."""
    where = API_PREFIX + path

    def refused(field: str, message: str) -> InvalidRequestError:
        return InvalidRequestError(0, "SpecError", field, f"{message}; not sent", method, where)

    list_of = "must be a list of records ([{'step': 1, 'loss': 0.5}])"
    if isinstance(metrics, Mapping):
        raise refused("metrics", f"{list_of}, not one record")
    if isinstance(metrics, str | bytes) or not isinstance(metrics, Iterable):
        raise refused("metrics", f"{list_of} (got {type(metrics).__name__})")
    records: list[dict[str, Any]] = []
    for index, record in enumerate(metrics):
        if not isinstance(record, Mapping):
            kind = type(record).__name__
            raise refused(f"metrics.{index}", f"must be a mapping of names to values (got {kind})")
        records.append(dict(record))
    return records
