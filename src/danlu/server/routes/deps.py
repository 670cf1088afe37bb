"""What every route needs: the server's state, the authenticated caller, input guards."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from danlu.config import Settings
from danlu.devices import Inventory
from danlu.executors import Executor
from danlu.server.db import Database, User
from danlu.server.errors import AuthError, NotFoundError, PermissionDenied
from danlu.server.services import users

if TYPE_CHECKING:
    from danlu.estimate.memory.tracer import WarmTracers
    from danlu.server.metrics import ServerMetrics
    from danlu.server.webhook_sender import WebhookSender

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}\Z")
"""What a job id, user, project or token name in a path may look like (anything else is 404)."""


def version() -> str:
    """danlu's installed version (``0+unknown`` when run from a source tree)."""
    try:
        return metadata.version("danlu")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@dataclass
class ServerState:
    """Everything the routes and loops share (one per app; no globals)."""

    settings: Settings
    db: Database
    executor: Executor
    inventory: Inventory
    metrics: ServerMetrics
    follow_timeout: float = 3600.0
    estimate_timeout: float = 120.0
    tracers: WarmTracers | None = None
    """Memory-estimate workers started ahead of need (``settings.estimate_warm_workers``);
    None: each trace starts its own."""
    wake: Callable[[], None] | None = None
    """Asks the reconcile loop for a pass now (after a submission or a cancellation)."""
    webhooks: WebhookSender | None = None
    """Posts the webhooks' deliveries (``webhooks.wake()`` after a ping)."""
    usage_half_life: float = 0.0
    """The half-life of the projects' recent usage that the scheduling policy reads (0:
    none); ``GET /projects`` reports the projects' recent usage with it."""
    extra: dict[str, Any] = field(default_factory=dict)


def get_state(request: Request) -> ServerState:
    """The :class:`ServerState` of the app serving ``request``."""
    state: ServerState = request.app.state.danlu
    return state


_bearer = HTTPBearer(auto_error=False, description="An API token: `Authorization: Bearer dl_...`")


def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    """The user owning the request's bearer token (401 when missing or unknown).

    Authentication runs in a read-only session (no write lock per request), so the token's
    ``last_used_at`` is not updated; the returned :class:`User` is a detached copy.
    """
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise AuthError("an API token is required: send 'Authorization: Bearer <token>'")
    state = get_state(request)
    with state.db.read_session() as session, session.no_autoflush:
        token = users.find_token(session, credentials.credentials)
        if token is None:
            raise AuthError("the API token is unknown or revoked; ask an admin for a new one")
        if token.job_id is not None and not _own_metrics(request, token.job_id):
            raise PermissionDenied(
                f"this token was issued to a run of job {token.job_id}: it may only report "
                "that job's metrics; use a user's token for anything else"
            )
        user = token.user
        return User(
            id=user.id,
            name=user.name,
            role=user.role,
            created_at=user.created_at,
            os_user=user.os_user,
            quota_gpus=user.quota_gpus,
        )


def _own_metrics(request: Request, job_id: str) -> bool:
    """Whether ``request`` reports the metrics of ``job_id``: all a job's token may do (any
    process that can read the job's environment holds it)."""
    route = request.scope.get("route")
    return (
        request.method == "POST"
        and getattr(route, "name", None) == "post_metrics"
        and request.path_params.get("job_id") == job_id
    )


Caller = Annotated[User, Depends(caller)]
State = Annotated[ServerState, Depends(get_state)]


def require_admin(user: User) -> None:
    """403 unless ``user`` is an admin."""
    if not user.is_admin:
        raise PermissionDenied(f"this route is for admins; {user.name!r} is not one")


def checked_name(value: str, kind: str, field_name: str = "id") -> str:
    """``value`` if it looks like a name or id (no separators, no NUL), else 404: a path
    parameter never reaches the database or the file system unchecked."""
    if not ID_RE.match(value):
        raise NotFoundError(kind, value, field_name)
    return value
