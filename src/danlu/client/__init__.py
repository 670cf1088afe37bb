"""A small typed client for the danlu REST API (``docs/api.md``), over :class:`httpx.Client`.

::

    from danlu.client import Client

    with Client.from_home(Path("~/.danlu")) as client:
        job = client.submit({"name": "hello", "command": ["python", "-c", "print('hi')"]})
        text, offset = client.logs(job["id"])

Every error is a :class:`~danlu.core.errors.DanluError`: HTTP errors become an :class:`ApiError`
subclass chosen by status code (and by the server's error ``type`` for 422), carrying the
server's ``type``, ``field`` and ``message`` unchanged; a body the client cannot send as JSON
(NaN, infinity) is an :class:`InvalidRequestError` with ``status`` 0, and a token that is not
printable ASCII a :class:`~danlu.core.errors.ConfigError`, before anything is sent. This
package imports only ``danlu.core`` and httpx and reads no environment variables: the CLI
resolves ``DANLU_HOME`` / ``DANLU_URL`` / ``DANLU_TOKEN`` through :mod:`danlu.config` and
passes them in.
"""

from danlu.client.discovery import API_PREFIX, DEFAULT_HOME, find_server, same_server
from danlu.client.errors import (
    ApiError,
    AuthError,
    ConflictError,
    GatewayError,
    InvalidRequestError,
    JobDict,
    NoServerError,
    NotFoundError,
    PermissionDenied,
    ServerError,
    ServerTimeout,
    ServerUnavailable,
    UnschedulableRequestError,
    WaitTimeout,
    error_from_response,
)
from danlu.client.rest import (
    FINISHED_STATES,
    LOG_OFFSET_HEADER,
    MAX_PAGE,
    METRICS_CURSOR_HEADER,
    Client,
)

__all__ = [
    "API_PREFIX",
    "DEFAULT_HOME",
    "FINISHED_STATES",
    "LOG_OFFSET_HEADER",
    "MAX_PAGE",
    "METRICS_CURSOR_HEADER",
    "ApiError",
    "AuthError",
    "Client",
    "ConflictError",
    "GatewayError",
    "InvalidRequestError",
    "JobDict",
    "NoServerError",
    "NotFoundError",
    "PermissionDenied",
    "ServerError",
    "ServerTimeout",
    "ServerUnavailable",
    "UnschedulableRequestError",
    "WaitTimeout",
    "error_from_response",
    "find_server",
    "same_server",
]
