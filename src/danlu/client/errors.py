"""The client's exception tree: every error of :class:`~danlu.client.Client` is a
:class:`~danlu.core.errors.DanluError`.

::

    DanluError
    ├── ApiError                   an error answer of the server (status, type, field, message),
    │                              or a redirect (3xx, type "redirect": not followed)
    │   ├── AuthError              401
    │   ├── PermissionDenied       403
    │   ├── NotFoundError          404 (also a LookupError)
    │   ├── ConflictError          409
    │   ├── InvalidRequestError    400 / 422 (also a SpecError); status 0: a body the client
    │   │                          cannot send as JSON (NaN, infinity), not sent
    │   ├── UnschedulableRequestError  422 that can never fit (also an UnschedulableError)
    │   └── ServerError            5xx, or an answer that is not JSON; for a request that
    │       │                      changes something (but the server's 503 busy or
    │       │                      unavailable) it may or may not have been carried out
    │       └── GatewayError       502 / 503 / 504 from a proxy in front of the server, not
    │                              the server's own: a request that changes something may
    │                              or may not have been carried out
    ├── ServerUnavailable          no answer at all
    │   └── ServerTimeout          the request was sent but not answered in time (it may
    │                              have been carried out)
    ├── ConfigError                a server URL or API token the client cannot use
    │   └── NoServerError          no server.json under the danlu home
    └── WaitTimeout                Client.wait ran out of time (also a TimeoutError)
"""

from __future__ import annotations

import html
import re
from typing import Any

import httpx

from danlu.core.errors import ConfigError, DanluError, SpecError, UnschedulableError

JobDict = dict[str, Any]


class ApiError(DanluError):
    """An error answer of the server: HTTP ``status`` plus the body's ``type``, ``field``
    (dotted, or ``None``) and ``message``, exactly as the server sent them; ``url``: where
    the request went (no query), when known. ``text``: what ``str()`` says, when not
    ``field: message`` (an answer that is not a danlu server's, named with its status and
    URL by :func:`error_from_response`)."""

    url: str = ""
    """The URL the request went to, without its query ("": not known)."""

    def __init__(
        self,
        status: int,
        type: str,
        field: str | None,
        message: str,
        method: str = "",
        path: str = "",
        *,
        url: str = "",
        text: str | None = None,
    ) -> None:
        self.status = status
        self.type = type
        self.field = field
        self.message = message
        self.method = method
        self.path = path
        self.url = url
        Exception.__init__(self, text or (f"{field}: {message}" if field else message))

    def __str__(self) -> str:
        return str(self.args[0])


class AuthError(ApiError):
    """401: no token, or a token the server does not know."""


class PermissionDenied(ApiError):
    """403: another user's job, or an admin-only route."""


class NotFoundError(ApiError, LookupError):
    """404: an unknown job, project, user or route."""


class ConflictError(ApiError):
    """409: the request conflicts with the current state (e.g. cancel a finished job)."""


class InvalidRequestError(ApiError, SpecError):  # type: ignore[misc]  # field may be None
    """422 (or 400): invalid input; ``field`` names the offending field. With ``status`` 0
    the client refused the request itself, before sending it: its JSON body held what JSON
    cannot (NaN, infinity, an object), at ``field``."""


class UnschedulableRequestError(ApiError, UnschedulableError):
    """422: a spec that can never fit the cluster (or its project's quota), with the reason."""


class ServerError(ApiError):
    """5xx: the server failed; its message is kept. Also an answer the client cannot read
    (not JSON, or not of the shape the API answers: ``status`` is then what came, a 2xx).

    For a request that changes something (``method`` a ``POST``, ``PUT``, ``PATCH`` or
    ``DELETE``) ``str()`` adds that it may or may not have been carried out, so check
    before sending it again: the server commits a change before it builds its answer, so
    its 500 may come after the change was made, and an unreadable 2xx is an answer to a
    request it took. Its 503 ``busy`` (nothing was changed) and ``unavailable`` (its
    database could not be reached) say what happened, and add nothing."""

    def __str__(self) -> str:
        text = super().__str__()
        told = self.status == 503 and self.type in _TOLD_TYPES
        if self.method.upper() not in _CHANGES or told:
            return text
        request = f"{self.method.upper()} {self.path}".strip()
        if self.status < 300:
            why = f"an answer {self.status} says it was taken, but the answer cannot be read"
        else:
            why = f"the server may have made the change before it failed ({self.status})"
        return f"{text}; {request} may or may not have been carried out ({why}): {_CHECK_FIRST}"


class GatewayError(ServerError):
    """A 502, 503 or 504 that a reverse proxy in front of the danlu server answered for it
    (:func:`from_proxy`: the body is not danlu's). ``message`` is the proxy's text as it
    came; ``str()`` says what it means: for a request that changes something (a ``POST``,
    ``PUT``, ``PATCH`` or ``DELETE``) the server may have carried it out before the proxy
    lost its answer (a 504), or never got it (a 502 or 503): check before sending it again.
    A :class:`ServerError`, as it was, for every ``except ServerError``."""

    def __str__(self) -> str:
        request = f"{self.method} {self.url or self.path}".strip() or "the request"
        said = (
            f"a proxy in front of the danlu server answered {self.status} "
            f"({page_words(self.message)})"
        )
        if self.method.upper() in _READS:
            return f"{request}: {said}; the server cannot be reached through it now: try again"
        return (
            f"{request}: {said}; the request may or may not have been carried out (the "
            f"server may have done it before the proxy lost its answer): {_CHECK_FIRST}"
        )


_READS = frozenset({"GET", "HEAD", "OPTIONS"})
"""The methods of requests that change nothing."""
_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""The methods of requests that change something."""
_CHECK_FIRST = "check before sending it again (`danlu ls`, `danlu sweep ls`, `danlu show ID`)"
"""What to do after a request that changes something may or may not have been carried out."""
_TOLD_TYPES = frozenset({"busy", "unavailable"})
"""The ``type`` of the server's own 503s, which say what became of the request (``busy``:
nothing was changed; ``unavailable``: its database could not be reached)."""


class ServerUnavailable(DanluError):
    """No answer from the server (connection refused, timeout, broken stream)."""


class ServerTimeout(ServerUnavailable):
    """The request was sent but the server did not answer it within the client's read
    timeout: it may be alive and busy, and may have carried the request out (a submission
    sent again could make its job twice)."""


def no_answer(
    exc: httpx.HTTPError, url: str, method: str, path: str, read_timeout: float | None
) -> ServerUnavailable:
    """The error for a ``method`` request of ``path`` (``/api/v1/jobs``) to the server at
    ``url`` that got no answer (``exc``): a :class:`ServerTimeout` once it was sent and not
    answered within ``read_timeout`` seconds (the server may be alive and busy, and may
    carry it out: a request that changes something says to check before sending it again),
    else, for a request that changes something, a connection the server closed or lost
    after the request was sent (it may have carried it out: the same advice), else a server
    that cannot be reached."""
    changes = method not in _READS
    if changes and isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return ServerUnavailable(
            f"the danlu server at {url} closed the connection before answering {method} "
            f"{path} ({exc or type(exc).__name__}); the request may still have been carried "
            "out: check before sending it again (`danlu ls`, `danlu sweep ls`)"
        )
    if not isinstance(exc, httpx.ReadTimeout):
        return ServerUnavailable(
            f"cannot reach the danlu server at {url}: {exc or type(exc).__name__}; "
            "is it running? (start one with `danlu up`)"
        )
    within = f" within {read_timeout:g} s" if read_timeout else ""
    text = f"the danlu server at {url} did not answer {method} {path}{within}"
    if not changes:
        return ServerTimeout(f"{text}; it may be busy: try again")
    return ServerTimeout(
        f"{text}; the request may still have been carried out: check before sending it "
        "again (`danlu ls`, `danlu sweep ls`)"
    )


GATEWAY_STATUSES = frozenset({502, 503, 504})
"""What a reverse proxy answers while the server behind it cannot be reached."""


def from_proxy(error: ApiError) -> bool:
    """Whether ``error`` is a 502, 503 or 504 whose body is not danlu's (``type`` ``http``):
    a proxy in front of the server answered for it, the server did not."""
    return error.status in GATEWAY_STATUSES and error.type == "http"


def parameter_not_taken(error: ApiError, name: str) -> bool:
    """Whether ``error`` is a server's refusal of the query parameter ``name`` as one it
    does not take (a 422 naming it: ``unknown query parameter 'before_id'``), as a server
    of a version before that parameter answers; not a 422 about its value."""
    return (
        isinstance(error, InvalidRequestError)
        and error.field == name
        and "query parameter" in error.message
    )


def out_of_reach(error: Exception) -> bool:
    """Whether ``error`` says the danlu server is out of reach for now, so that a follower
    asks again (a control-plane restart): no answer (:class:`ServerUnavailable`), a proxy's
    502, 503 or 504 in front of it (:func:`from_proxy`), or its own 503 ``unavailable`` (its
    database cannot be reached: it carries on once it is back)."""
    if isinstance(error, ServerUnavailable):
        return True
    if not isinstance(error, ServerError):
        return False
    return from_proxy(error) or (error.status == 503 and error.type == "unavailable")


class NoServerError(ConfigError):
    """No ``server.json`` under the danlu home: no server was started there."""


class WaitTimeout(DanluError, TimeoutError):
    """:meth:`Client.wait` (or :func:`~danlu.client.waits.wait_all`) ran out of time;
    ``unfinished`` names what had not finished yet (:meth:`Client.wait`: the jobs' ids as
    given) and ``finished`` holds the Jobs that had. ``message``: the text, when the caller
    names the unfinished ones better than by their ids (``array ID (NAME)``)."""

    def __init__(
        self,
        unfinished: list[str],
        finished: list[JobDict],
        timeout: float,
        message: str | None = None,
    ) -> None:
        self.unfinished = unfinished
        self.finished = finished
        self.timeout = timeout
        super().__init__(
            message
            or f"{len(unfinished)} job(s) not finished after {timeout:g}s: {', '.join(unfinished)}"
        )


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequestError,
    401: AuthError,
    403: PermissionDenied,
    404: NotFoundError,
    409: ConflictError,
    422: InvalidRequestError,
}
_UNSCHEDULABLE_TYPES = {"AdmissionError", "UnschedulableError"}


def redirected(response: httpx.Response) -> str:
    """What a 3xx ``response`` says: the server answered elsewhere (a proxy that moved it to
    https, a URL of another path). Not followed: a POST redirected comes back a GET, and the
    token would go to wherever it points."""
    where = response.headers.get("Location")
    to = f" to {where[:200]}" if where else ""
    return (
        f"the server answered {response.status_code} {response.reason_phrase}, redirecting"
        f"{to}; not followed: give the danlu server's own URL (--url, DANLU_URL)"
    )


_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
PAGE_WORDS = 200
"""The most characters of a page that is not a danlu server's an error message shows."""


def page_words(text: str) -> str:
    """The words of ``text``, a body that is not a danlu server's (a proxy's HTML page), as
    an error message shows them on one line: an HTML page's title when it has one, else its
    text without tags, entities read and whitespace (line breaks too) made one space, cut
    to :data:`PAGE_WORDS` characters; ``an empty page`` when nothing is left."""
    title = _TITLE.search(text)
    words = title.group(1) if title and title.group(1).strip() else _TAG.sub(" ", text)
    words = " ".join(html.unescape(words).split())
    if len(words) > PAGE_WORDS:
        words = words[: PAGE_WORDS - 3] + "..."
    return words or "an empty page"


def _request_url(response: httpx.Response) -> str:
    """The URL ``response`` answered, without its query ("" for a response built without
    a request)."""
    try:
        return str(response.request.url.copy_with(query=None, fragment=None))
    except RuntimeError:
        return ""


def _not_danlus(response: httpx.Response, message: str, danlus: bool, kind: str) -> str | None:
    """What an error ``response`` whose answer is not of a danlu server says, naming the
    request's URL and the status (None for a danlu server's own error, said as it is): a
    body that is no danlu error (a proxy's page, another web server at a wrong path), or
    the danlu server's 404 or 405 for a route it does not have (``Not Found``: the server
    URL's path is wrong)."""
    request = f"{response.request.method} {_request_url(response)}"
    where = (
        "check that the server URL (--url, DANLU_URL) names the danlu server, with the path "
        "a proxy in front of it serves it under"
    )
    status = response.status_code
    if not danlus:
        answered = f"{status} {response.reason_phrase}".strip()
        return (
            f"{request}: answered {answered} with a page that is no danlu server's "
            f"({page_words(message)}); {where}"
        )
    if status in (404, 405) and kind == "http":
        return (
            f"{request}: {status} {message}: the danlu server there has no such route; "
            f"{where}, and that the server is of this version"
        )
    return None


def error_from_response(response: httpx.Response) -> ApiError:
    """The :class:`ApiError` subclass for an error ``response`` (body read already): a 3xx
    (a redirect, not followed) is an :class:`ApiError` of ``type`` ``redirect``. An answer
    that is not a danlu server's error (:func:`_not_danlus`) says so with the request's URL
    and the status; its ``message`` is still the body's text (at most 500 characters)."""
    status = response.status_code
    kind, field, message = "http", None, ""
    danlus = True  # a danlu server's error body (or a FastAPI one's)
    try:
        body = response.json()
    except (ValueError, RecursionError):  # not JSON; or nested deeper than Python parses
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        kind = str(error.get("type") or "http")
        field = str(error["field"]) if error.get("field") is not None else None
        message = str(error.get("message") or "")
    elif isinstance(body, dict) and "detail" in body:  # a plain FastAPI error
        detail = body["detail"]
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):
            where = detail[0].get("loc")
            where = where if isinstance(where, list) else []  # a loc of another shape: no field
            loc = [str(p) for p in where if p not in ("body", "query", "path")]
            field = ".".join(loc) or None
            message = str(detail[0].get("msg", ""))
        else:
            message = str(detail)
    else:
        danlus = False
    if not message:
        message = (response.text.strip() or response.reason_phrase or "error")[:500]
    try:
        method, path = response.request.method, response.request.url.path
    except RuntimeError:  # a response built without a request
        method, path = "", ""
    url = _request_url(response)
    if 300 <= status < 400:
        return ApiError(status, "redirect", None, redirected(response), method, path, url=url)
    if status == 422 and kind in _UNSCHEDULABLE_TYPES:
        cls: type[ApiError] = UnschedulableRequestError
    elif status in GATEWAY_STATUSES and kind == "http":  # from_proxy: not danlu's answer
        cls = GatewayError
    elif status >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(status, ApiError)
    told = None
    if url and status >= 400 and cls is not GatewayError:  # a proxy's 502: its own words
        told = _not_danlus(response, message, danlus, kind)
    return cls(status, kind, field, message, method, path, url=url, text=told)
