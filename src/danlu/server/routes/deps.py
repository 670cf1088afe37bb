"""What every route needs: the server's state, the authenticated caller, input guards."""

from __future__ import annotations

import logging
import re
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.exc import SQLAlchemyError
from starlette.routing import BaseRoute

from danlu.config import Settings
from danlu.core.errors import SpecError
from danlu.core.values import quoted
from danlu.devices import Inventory
from danlu.executors import Executor
from danlu.server.db import Database, User
from danlu.server.errors import AuthError, NotFoundError, PermissionDenied
from danlu.server.services import users
from danlu.server.services.common import ID_PREFIX_LENGTHS

if TYPE_CHECKING:
    from danlu.estimate.memory.tracer import WarmTracers
    from danlu.server.metrics import ServerMetrics
    from danlu.server.webhook_sender import WebhookSender

log = logging.getLogger(__name__)

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}\Z")
"""What a job id, user, project or token name in a path may look like (anything else is 404)."""


def version() -> str:
    """danlu's installed version (``0+unknown`` when run from a source tree)."""
    try:
        return metadata.version("danlu")
    except metadata.PackageNotFoundError:
        return "0+unknown"


TOKEN_USE_WAIT_SECONDS = 5.0
"""How long the app's shutdown waits for the token-use writes under way
(:meth:`BackgroundWrites.close`) before it closes the database's connections anyway."""


class BackgroundWrites:
    """The writes of the threads :func:`_note_use` starts: those under way, and whether the
    app has closed (:meth:`close`): a write begun after that is skipped. A thread that ran
    after the app's shutdown had closed the database's connections opened a new one (the
    engine makes a new pool after ``dispose``), left open for the life of the process."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called: no write begins any more."""
        return self._closed

    def begin(self) -> bool:
        """Whether a write may begin (then it is under way until :meth:`end`)."""
        with self._changed:
            if self._closed:
                return False
            self._running += 1
            return True

    def end(self) -> None:
        """A write that :meth:`begin` let through has ended."""
        with self._changed:
            self._running -= 1
            self._changed.notify_all()

    def close(self, timeout: float = TOKEN_USE_WAIT_SECONDS) -> bool:
        """Let no write begin from now, and wait up to ``timeout`` seconds for those under
        way to end; whether none is left."""
        with self._changed:
            self._closed = True
            return self._changed.wait_for(lambda: self._running == 0, timeout)


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
    token_uses: dict[int, float] = field(default_factory=dict)
    """When this process last stored a use of each token (by row id): one write a token
    a minute at most, however many requests race (:func:`caller`)."""
    token_writes: BackgroundWrites = field(default_factory=BackgroundWrites)
    """The token-use writes under way; closed by the app's shutdown before the database's
    connections are (:meth:`close_token_writes`)."""

    def close_token_writes(self) -> None:
        """Let no token-use write begin from now, and wait a while
        (:data:`TOKEN_USE_WAIT_SECONDS`) for those under way: the app's shutdown, before it
        closes the database's connections."""
        if not self.token_writes.close():
            log.warning(
                "a token's last use is still being written %g s after the shutdown began; "
                "the database's connections are closed anyway",
                TOKEN_USE_WAIT_SECONDS,
            )


def get_state(request: Request) -> ServerState:
    """The :class:`ServerState` of the app serving ``request``."""
    state: ServerState = request.app.state.danlu
    return state


_bearer = HTTPBearer(auto_error=False, description="An API token: `Authorization: Bearer dl_...`")

TOKEN_REQUIRED = "an API token is required: send 'Authorization: Bearer <token>'"
"""The 401's message for a request with no bearer token (:func:`caller`, and the app's
middleware that refuses such a request before its body is read)."""


def has_bearer(authorization: str | None) -> bool:
    """Whether an ``Authorization`` header's value carries a bearer token, as
    :data:`_bearer` reads it (:func:`caller` refuses a request without one, whatever its
    token is worth)."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    return bool(scheme and credentials) and scheme.lower() == "bearer"


def needs_token(route: BaseRoute | None) -> bool:
    """Whether ``route`` authenticates its caller (:func:`caller` is among its dependencies,
    however deep): the routes that are not public (None: no route, False)."""
    dependant: Dependant | None = getattr(route, "dependant", None)
    return dependant is not None and _calls(dependant, caller)


def _calls(dependant: Dependant, call: Callable[..., Any]) -> bool:
    """Whether ``dependant`` or one of its sub-dependencies is ``call``."""
    return dependant.call is call or any(_calls(sub, call) for sub in dependant.dependencies)


def single_valued(request: Request) -> None:
    """422 naming a query parameter given more than once where the route reads one value
    (``?user=alice&user=bob``): it would otherwise keep the last one without a word. One
    the route reads as a list (``?state=RUNNING&state=PENDING``) may repeat.

    Also 422 naming a query parameter the route does not read at all, on a route that needs
    a token (``/health`` takes what a probe adds): a misspelt filter was dropped without a
    word, so ``GET /jobs?states=FAILED`` listed every job (and a script cancelling what it
    listed cancelled them all), ``/events?after=N`` read the feed from its start."""
    query = request.query_params
    route = request.scope.get("route")
    dependant: Dependant | None = getattr(route, "dependant", None)
    if not query or dependant is None:
        return
    params = sorted(_query_params(dependant), key=lambda p: p.alias)
    if needs_token(route):
        known = {param.alias for param in params}
        unknown = sorted(key for key in query if key and key not in known)
        if unknown:
            takes = f"it takes {', '.join(sorted(known))}" if known else "it takes none"
            name = unknown[0]
            shown = name if name.isprintable() and len(name) <= 64 else quoted(name)
            raise SpecError(
                shown,
                f"unknown query parameter {quoted(name)}; check the spelling against "
                f"docs/api.md ({takes})",
            )
    repeated = {key for key in query if len(query.getlist(key)) > 1}
    for param in params:
        if param.alias in repeated and not _repeatable(param.field_info.annotation):
            raise SpecError(
                param.alias,
                f"given {len(query.getlist(param.alias))} times; give it once "
                f"({param.alias}=... takes one value)",
            )


def _query_params(dependant: Dependant) -> list[Any]:
    """The query parameters ``dependant`` and its sub-dependencies read."""
    found = list(dependant.query_params)
    for sub in dependant.dependencies:
        found += _query_params(sub)
    return found


def _repeatable(annotation: Any) -> bool:
    """Whether a query parameter of type ``annotation`` takes several values (a list)."""
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return any(_repeatable(arg) for arg in get_args(annotation))
    return origin in (list, set, frozenset, tuple) or annotation in (list, set, frozenset, tuple)


def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    """The user owning the request's bearer token (401 when missing or unknown, and when
    its user is disabled, saying so; a running job's own token still reports its metrics).

    Authentication runs in a read-only session (no write lock per request); the returned
    :class:`User` is a detached copy. The token's ``last_used_at`` is stored in a write of
    its own, beside the request, when the stored one is a minute old (:func:`_note_use`):
    a request refused after authentication (403, 404, ...) used the token too.
    ``request.state.job_token``: the job whose run's token it is, or None for a user's
    token.
    """
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise AuthError(TOKEN_REQUIRED)
    state = get_state(request)
    with state.db.read_session() as session, session.no_autoflush:
        token = users.find_token(session, credentials.credentials)
        if token is None:
            raise AuthError("the API token is unknown or revoked; ask an admin for a new one")
        _note_use(state, token.id, token.last_used_at)
        if users.refused(token):
            raise AuthError(users.disabled_message(token.user))
        if token.job_id is not None and not _own_run(request, token.job_id):
            raise PermissionDenied(
                f"this token was issued to a run of job {token.job_id}: it may only report "
                "that job's metrics (and read why its run is being stopped); use a user's "
                "token for anything else"
            )
        request.state.job_token = token.job_id
        user = token.user
        found = User(
            id=user.id,
            name=user.name,
            role=user.role,
            created_at=user.created_at,
            os_user=user.os_user,
            quota_gpus=user.quota_gpus,
            disabled_at=user.disabled_at,
            disabled_by=user.disabled_by,
            disable_reason=user.disable_reason,
        )
    return found


def _note_use(state: ServerState, token_id: int, stored: float | None) -> None:
    """Store a use of token ``token_id`` in a thread of its own (not in the request's read
    session, never delaying or failing the request, and whatever the request's answer: a
    response's background tasks run only after a route that succeeded, and a stream's only
    once it ends) when the stored ``last_used_at`` (``stored``) and this process's last
    write of it are both a minute old (:data:`users.TOKEN_USE_RESOLUTION`)."""
    now = time.time()
    written = state.token_uses.get(token_id)
    if not users.use_is_due(stored, now) or not users.use_is_due(written, now):
        return
    writes = state.token_writes  # this lifespan's (a lifespan run again makes new ones)
    if writes.closed:  # the app is shutting down: its connections are closed
        return
    if len(state.token_uses) >= 10_000:  # forget the old ones (the stored time still counts)
        state.token_uses.clear()
    state.token_uses[token_id] = now
    threading.Thread(
        target=_store_use,
        args=(state, token_id, now, writes),
        name="danlu-token-use",
        daemon=True,  # a write cut short by the process's exit is rolled back
    ).start()


def _store_use(
    state: ServerState, token_id: int, now: float, writes: BackgroundWrites | None = None
) -> None:
    """Write a token's ``last_used_at``; a store that is busy or away: skipped, logged, and
    tried again at the token's next use. Skipped once the app has closed
    (:meth:`ServerState.close_token_writes`): its database's connections are closed.
    ``writes``: those of the lifespan the request came in (default: the state's now).

    A write that the shutdown stopped waiting for (:data:`TOKEN_USE_WAIT_SECONDS`) closes
    its connection as it ends instead of handing it back to the pool: the shutdown has
    disposed of that pool already, and a connection handed back to it stayed open (a
    PostgreSQL session) for the life of the process."""
    writes = state.token_writes if writes is None else writes
    if not writes.begin():
        log.debug("token %s: its last use was not stored: the server is shutting down", token_id)
        return
    try:
        with state.db.engine.connect() as connection:
            try:
                with state.db.sessionmaker(bind=connection) as session, session.begin():
                    users.touch_token(session, token_id, now)
            finally:
                if writes.closed:  # the shutdown began: its pool is (about to be) disposed
                    connection.invalidate()
    except SQLAlchemyError as exc:
        log.debug("token %s: its last use was not stored: %s", token_id, exc)
        state.token_uses.pop(token_id, None)
    finally:
        writes.end()


_RUN_ROUTES = {("POST", "post_metrics"), ("GET", "job_stopping")}
"""The routes a job run's token may call, for its own job: report its metrics, and read why
its run is being stopped (danlu.train asks on SIGTERM)."""


def _own_run(request: Request, job_id: str) -> bool:
    """Whether ``request`` reports the metrics of ``job_id`` or reads why its run is being
    stopped (:data:`_RUN_ROUTES`): all a job's token may do (any process that can read the
    job's environment holds it). The path may name the job by a prefix of its id, as
    everywhere; the route checks that the prefix resolves to ``job_id``
    (``request.state.job_token``), so that it never reaches another job."""
    route = request.scope.get("route")
    named = request.path_params.get("job_id")
    return (
        (request.method, getattr(route, "name", None)) in _RUN_ROUTES
        and isinstance(named, str)
        and (named == job_id or (len(named) in ID_PREFIX_LENGTHS and job_id.startswith(named)))
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


def body_named(exc: SpecError) -> SpecError:
    """``exc``, a spec's error, naming ``body`` where it names no field (it is about the
    spec as a whole: an empty one, ``{}``), so that every 422 of a request body names a
    field, as docs/api.md says."""
    return exc if exc.field else SpecError("body", exc.message)
