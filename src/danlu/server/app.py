"""The FastAPI application of the control plane (docs/api.md).

:func:`create_app` wires the store, the executor, the metrics registry and the reconcile loop
into one app; nothing here is global, so tests build as many apps as they like.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy import select
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from danlu.config import DEFAULT_MAX_BODY_BYTES, Settings, job_base_env
from danlu.core.cluster import gpu_type
from danlu.core.errors import (
    ConfigError,
    DanluError,
    InvalidTransitionError,
    PlacementError,
    SpecError,
    UnknownNameError,
    UnschedulableError,
)
from danlu.devices import Inventory, inventory_from_cluster
from danlu.devices.energy import energy_meter
from danlu.devices.health import health_check
from danlu.estimate.memory.tracer import WarmTracers
from danlu.executors import Executor, ExecutorError, LocalExecutor
from danlu.executors.ray_nodes import RAY_NEEDED
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands
from danlu.sched.project_usage import usage_half_life
from danlu.server.db import Database, upgrade_database
from danlu.server.db.models import Job
from danlu.server.energy import EnergyLoop
from danlu.server.errors import (
    AdmissionError,
    AuthError,
    ConflictError,
    NotFoundError,
    PermissionDenied,
)
from danlu.server.gpus import find_inventory
from danlu.server.health import HealthLoop, HealthProgram
from danlu.server.inventory import log_over_commits
from danlu.server.loops import close_quietly
from danlu.server.metrics import ServerMetrics
from danlu.server.plane_lease import EXECUTOR_STATE
from danlu.server.reconcile import Reconciler
from danlu.server.routes import admin, dashboard, events, jobs, sweeps, webhooks
from danlu.server.routes.deps import (
    TOKEN_REQUIRED,
    BackgroundWrites,
    ServerState,
    has_bearer,
    needs_token,
    version,
)
from danlu.server.services import cluster as cluster_service
from danlu.server.services.projects import HOLDING
from danlu.server.webhook_sender import WebhookSender

log = logging.getLogger(__name__)
API = "/api/v1"

_STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (AuthError, 401),
    (PermissionDenied, 403),
    (NotFoundError, 404),
    (ConflictError, 409),
    (InvalidTransitionError, 409),
    (PlacementError, 409),
    (AdmissionError, 422),
    (SpecError, 422),
    (UnschedulableError, 422),
    (ConfigError, 422),
    (UnknownNameError, 422),
    (ExecutorError, 409),
)


def error_body(kind: str, field: str | None, message: str) -> dict[str, Any]:
    """The structured error body of docs/api.md."""
    return {"error": {"type": kind, "field": field, "message": message}}


def _danlu_error(_request: Request, exc: Exception) -> Response:
    status = next((code for cls, code in _STATUS if isinstance(exc, cls)), 400)
    field = getattr(exc, "field", None)
    message = getattr(exc, "message", None) or str(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        error_body(type(exc).__name__, field or None, message), status, headers=headers
    )


def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    loc = [str(p) for p in first.get("loc", ())]
    where = loc[0] if loc else ""
    path = loc[1:] if where in ("body", "query", "path", "header", "cookie") else loc
    field = ".".join(path) or where or None
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if first.get("type") == "missing":
        msg = "this field is required"
    elif first.get("type") == "extra_forbidden":
        msg = "unknown field; check the spelling against docs/api.md"
    elif first.get("type") == "json_invalid":
        field, msg = "body", "the body is not valid JSON"
    if path == [] and where == "body" and isinstance(exc.body, (bytes, bytearray)):
        # FastAPI reads a body as JSON only when its Content-Type says so: this one's
        # bytes were left unread, and pydantic's "Input should be a valid dictionary" spoke
        # of a body that may well be a JSON object (``curl -d`` sends a form's type)
        field, msg = "body", _not_json(request)
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return JSONResponse(error_body("SpecError", field, msg + more), 422)


def _not_json(request: Request) -> str:
    """The 422's message for a body not sent as JSON (its Content-Type, or none)."""
    given = request.headers.get("content-type")
    shown = "none" if given is None else repr(given[:100])
    return (
        "send the body as JSON with the header 'Content-Type: application/json' (this "
        f"request's Content-Type: {shown})"
    )


def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):
        # FastAPI's bare 400 for a body its JSON parser could not read: one nested so deep
        # that the parser ran out of stack, as invalid as any other bad JSON
        message = "the body's JSON is nested too deeply to read; send one nested far less"
        return JSONResponse(error_body("SpecError", "body", message), 422)
    return JSONResponse(
        error_body("http", None, str(exc.detail)), exc.status_code, headers=exc.headers
    )


_BUSY_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
"""PostgreSQL: serialization failure, deadlock detected, lock not available."""
BUSY_RETRY_AFTER_S = 1
UNREACHABLE_RETRY_AFTER_S = 5
FULL_RETRY_AFTER_S = 30


def is_busy(exc: OperationalError) -> bool:
    """Whether a database error means "busy, try again" (a lock wait ran out, or PostgreSQL
    gave up on a transaction to break a conflict): nothing was written."""
    orig = exc.orig
    if getattr(orig, "sqlstate", None) in _BUSY_SQLSTATES:
        return True
    text = str(orig).lower()
    return "database is locked" in text or "database is busy" in text


_GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
"""PostgreSQL: admin shutdown, crash shutdown, cannot connect now (class 08 too)."""


def is_unreachable(exc: OperationalError) -> bool:
    """Whether a database error means the database cannot be reached (down, restarting,
    the connection lost)."""
    if exc.connection_invalidated:
        return True
    state = getattr(exc.orig, "sqlstate", None) or ""
    if state.startswith("08") or state in _GONE_SQLSTATES:
        return True
    text = str(exc.orig).lower()
    return any(
        marker in text
        for marker in ("connection failed", "server closed the connection", "unable to open")
    )


def is_full(exc: OperationalError) -> bool:
    """Whether a database error means its disk is full (SQLite's SQLITE_FULL, PostgreSQL's
    disk_full): nothing was written, and retrying helps only once space is freed."""
    if getattr(exc.orig, "sqlstate", None) == "53100":
        return True
    return "database or disk is full" in str(exc.orig).lower()


def _database_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OperationalError)
    if is_full(exc):
        log.error("database disk full, answered 503: %s", str(exc.orig).strip())
        return JSONResponse(
            error_body(
                "unavailable",
                None,
                "the database's disk is full; nothing was changed. Free space on it, then retry",
            ),
            503,
            headers={"Retry-After": str(FULL_RETRY_AFTER_S)},
        )
    if not is_busy(exc):
        if is_unreachable(exc):
            log.warning("database unreachable, answered 503: %s", str(exc.orig).strip())
            return JSONResponse(
                error_body(
                    "unavailable", None, "the database cannot be reached; retry in a moment"
                ),
                503,
                headers={"Retry-After": str(UNREACHABLE_RETRY_AFTER_S)},
            )
        return _internal_error(request, exc)
    log.warning("database busy, answered 503: %s", exc.orig)
    return JSONResponse(
        error_body("busy", None, "the database is busy; nothing was changed, retry shortly"),
        503,
        headers={"Retry-After": str(BUSY_RETRY_AFTER_S)},
    )


def _internal_error(_request: Request, exc: Exception) -> Response:
    log.exception("internal error: %s", exc)
    # sent by Starlette's outermost middleware, past :class:`NoSniff`: its header here
    return JSONResponse(
        error_body("internal", None, "internal server error; see the log"), 500, headers=NOSNIFF
    )


NOSNIFF = {"X-Content-Type-Options": "nosniff"}
"""The header every response carries (:class:`NoSniff`): a browser takes its body as the
``Content-Type`` says, never as what the bytes look like."""


class NoSniff:
    """ASGI middleware: every response carries ``X-Content-Type-Options: nosniff``
    (:data:`NOSNIFF`), the API's as the dashboard's files do. A job's log
    (``GET /jobs/{id}/logs``, ``text/plain``) and a metric record's or a spec's strings in
    JSON are the submitter's bytes: without it a browser may sniff such a body as HTML and
    run a script in it with the control plane's origin. A response that sets the header
    itself keeps its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(bytes(k).lower() == b"x-content-type-options" for k, _ in headers):
                    headers.append((b"x-content-type-options", b"nosniff"))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_header)


class RejectNul:
    """ASGI middleware: a request whose path or query holds an encoded NUL is a 422 (no
    database or file system ever sees such a string)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = bytes(scope.get("query_string", b"")).lower() + str(scope.get("path", "")).encode(
                "utf-8", "surrogateescape"
            )
            if b"%00" in raw or b"\0" in raw:
                response = JSONResponse(
                    error_body("SpecError", None, "NUL characters are not allowed in a URL"), 422
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


MAX_BODY_BYTES = DEFAULT_MAX_BODY_BYTES
"""The default cap on a request's body, in bytes (the settings' default)."""
MAX_BODY_SETTING = "DANLU_MAX_BODY_BYTES"
"""The control plane's setting that changes :data:`MAX_BODY_BYTES` (named in the 413)."""


CLOSE = {"Connection": "close"}
"""The header of a refusal sent before the request's body was read: the HTTP server closes
the connection after it instead of reading the rest of the body (and dropping it)."""


class BodyTooLarge(StarletteHTTPException):
    """A request body over the cap of :class:`GuardBody`: a 413 naming the cap and the
    setting that changes it (rendered by :func:`_http_error`, as every HTTP error), on a
    connection then closed (:data:`CLOSE`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            f"the request body is over the control plane's limit of {limit:,} bytes; send "
            "less in one request (metric records in smaller batches), or ask the admin to "
            f"raise {MAX_BODY_SETTING} on the control plane",
            headers=CLOSE,
        )


class NoToken(StarletteHTTPException):
    """A route that needs a token was about to read the body of a request without one
    (:class:`GuardBody`): the 401 of :func:`~danlu.server.routes.deps.caller`, rendered as
    its :class:`AuthError` (:func:`_no_token`), on a connection then closed
    (:data:`CLOSE`). An HTTP error, as FastAPI passes those on unchanged when they are
    raised while it reads a body (any other is its 400)."""

    def __init__(self) -> None:
        super().__init__(401, TOKEN_REQUIRED)


def _no_token(request: Request, _exc: Exception) -> Response:
    response = _danlu_error(request, AuthError(TOKEN_REQUIRED))
    response.headers.update(CLOSE)
    return response


def _header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of the request's header ``name`` (lower case), or None."""
    for key, value in scope.get("headers", ()):
        if bytes(key).lower() == name:
            return bytes(value)
    return None


class GuardBody:
    """ASGI middleware: what a request's body may cost before anyone is known.

    - A body is at most ``limit`` bytes, else a 413 (:class:`BodyTooLarge`): a
      ``Content-Length`` over it is refused before a byte of the body is read; a body
      without one (chunked) is counted as its parts arrive, and the read that passes the cap
      raises instead of returning, so that nothing past it is read.
    - A route that needs a token (:func:`needs_token`: the route is in the scope once the
      router matched it) reads no body of a request that carries no bearer token at all: its
      first read raises :class:`NoToken` (a 401), where FastAPI would read and parse the
      whole body before it solves the route's dependencies, :func:`caller` among them.
      No database here: :func:`caller` still checks the token of every other request.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = (_header(scope, b"content-length") or b"").strip()
        if declared.isdigit() and int(declared) > self.limit:
            await _http_error(Request(scope), BodyTooLarge(self.limit))(scope, receive, send)
            return
        authorization = _header(scope, b"authorization")
        tokenless = not has_bearer(authorization.decode("latin-1") if authorization else None)
        received = 0

        async def guarded() -> Message:
            nonlocal received, tokenless
            if tokenless:  # the first read: the router has put the route in the scope
                if needs_token(scope.get("route")):
                    raise NoToken()
                tokenless = False  # a public route: read on
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        await self.app(scope, guarded, send)


def build_inventory(settings: Settings, fake_gpus: str | None = None) -> Inventory:
    """GPUs from ``fake_gpus`` (or ``settings.fake_gpus``) when given, else from NVML, as
    ``danlu server`` finds them (:func:`~danlu.server.gpus.find_inventory`: one fake GPU
    where this host has no NVML, a :class:`ConfigError` where NVML is there and serves no
    GPU); a fake inventory is logged."""
    return find_inventory(fake_gpus or settings.fake_gpus, lambda text: log.warning("%s", text))


def build_slurm_executor(settings: Settings, api_url: str | None) -> SlurmExecutor:
    """The Slurm executor of ``settings`` (``DANLU_EXECUTOR=slurm``): state under
    ``{home}/executor``, logs under ``{home}/logs`` (both on a filesystem the nodes share);
    Slurm's commands run with this process's environment (``SLURM_CONF``, ``PATH``)."""
    home = Path(settings.home)
    env = job_base_env()
    return SlurmExecutor(
        SlurmCommands(env),
        home / EXECUTOR_STATE,
        partition=settings.slurm_partition,
        gpu_type=gpu_type(settings.slurm_gpu_type),
        log_dir=home / "logs",
        base_env=env,
        api_url=api_url,
        preempt_grace=settings.preempt_grace,
        sbatch_options=settings.sbatch_options,
        pending_limit=settings.slurm_pending_limit or None,
        log_max_bytes=settings.log_max_bytes,
    )


def build_cluster_executor(settings: Settings, api_url: str | None) -> Executor:
    """The executor of a cluster, which reports its own nodes: Slurm's
    (:func:`build_slurm_executor`) or Ray's (state under ``{home}/executor``, logs under
    ``{home}/logs``, the cluster at ``settings.ray_address``, claimed for this plane: a
    :class:`~danlu.executors.ray_claim.ClusterClaimedError`, a :class:`ConfigError`, while
    another home's plane holds it)."""
    if settings.executor == "slurm":
        return build_slurm_executor(settings, api_url)
    try:
        import ray  # noqa: F401 - the executor imports it when built

        from danlu.executors.ray_executor import RayExecutor
    except ImportError:
        raise ConfigError(RAY_NEEDED) from None

    home = Path(settings.home)
    return RayExecutor(
        home / EXECUTOR_STATE,
        address=settings.ray_address,
        log_dir=home / "logs",
        base_env=job_base_env(),
        api_url=api_url,
        preempt_grace=settings.preempt_grace,
        plane_home=home,  # one plane a cluster: another plane's live claim refuses the start
        log_max_bytes=settings.log_max_bytes,
    )


def build_executor(settings: Settings, inventory: Inventory, api_url: str | None) -> Executor:
    """The executor ``settings`` name: the local one (state under ``{home}/executor``, logs
    under ``{home}/logs``, the GPUs of ``inventory``), or a cluster's, with its own inventory
    (:func:`build_cluster_executor`)."""
    if settings.executor != "local":
        return build_cluster_executor(settings, api_url)
    home = Path(settings.home)
    return LocalExecutor(
        inventory.cluster(),
        home / EXECUTOR_STATE,
        log_dir=home / "logs",
        base_env=job_base_env(),
        api_url=api_url,
        devices=inventory.device_map(),
        log_max_bytes=settings.log_max_bytes,
    )


def _health_program(settings: Settings) -> HealthProgram | None:
    """The admin's health program of ``settings`` (None: none, or checks off); refused with a
    :class:`ConfigError` before anything starts when it cannot run, or the executor is not
    the local one."""
    if settings.health_interval <= 0 or settings.health_program is None:
        return None
    if settings.executor != "local":
        raise ConfigError(
            "DANLU_HEALTH_PROGRAM runs on the control plane's host, for the local "
            f"executor; with {settings.executor}, check the nodes with the cluster's own "
            "(Slurm's HealthCheckProgram), or leave DANLU_HEALTH_PROGRAM unset"
        )
    program = HealthProgram(settings.health_program)
    why = program.check()
    if why is not None:
        raise ConfigError(f"DANLU_HEALTH_PROGRAM: {why}")
    return program


def _health_loop(
    settings: Settings, db: Database, inventory: Inventory, program: HealthProgram | None
) -> HealthLoop | None:
    """The health loop (None: nothing to check, or checks off): NVML's GPU faults, and
    ``program`` for the local executor's nodes."""
    if settings.health_interval <= 0:
        return None
    check = health_check(inventory)
    if check is None and program is None:
        return None
    hosts = [node.name for node in inventory.nodes]
    return HealthLoop(
        db,
        check,
        program=program,
        hosts=hosts,
        interval=settings.health_interval,
        drain=settings.health_drain,
        opener=lambda: health_check(inventory),  # a lifespan run again: its stop closed it
    )


def create_app(
    settings: Settings,
    *,
    executor: Executor | None = None,
    start_loops: bool = True,
    inventory: Inventory | None = None,
    api_url: str | None = None,
    follow_timeout: float = 3600.0,
    preempt_grace: float | None = None,
    max_body_bytes: int | None = None,
) -> FastAPI:
    """The danlu API app. Migrates the store and records the executor's inventory at once;
    the reconcile loop runs in a background thread during the app's lifespan when
    ``start_loops`` (else call ``app.state.reconciler.run_once()`` yourself). A request
    body is at most ``max_body_bytes`` (None: the settings', ``DANLU_MAX_BODY_BYTES``).

    A step failing after the store is opened (its migration, the inventory, an unknown
    policy) closes what was made before it raises: the database's connections, and the
    executor when it was built here (an ``executor`` given stays the caller's to close until
    the app is made; the app's lifespan closes it after that). Its pool of connections
    (PostgreSQL's sessions) was left open, for as long as the process ran."""
    if max_body_bytes is None:
        max_body_bytes = settings.max_body_bytes  # DANLU_MAX_BODY_BYTES
    if max_body_bytes < 1:
        raise ConfigError(
            f"{MAX_BODY_SETTING} must be a positive number of bytes, e.g. "
            f"{MAX_BODY_SETTING}={MAX_BODY_BYTES} (got {max_body_bytes})"
        )
    program = _health_program(settings)  # refused before the store is opened
    with contextlib.ExitStack() as undo:  # a later step failing closes what was made
        db = Database(settings.db_url)
        undo.callback(close_quietly, "the database's connections", db.dispose)
        upgrade_database(db.engine)
        cluster_source = settings.executor if settings.executor != "local" else "fake"
        if executor is None and settings.executor != "local":
            executor = build_cluster_executor(settings, api_url)
            undo.callback(close_quietly, "the executor", executor.close)
        if inventory is None:
            inventory = (
                build_inventory(settings)
                if executor is None
                else inventory_from_cluster(executor.inventory(), cluster_source)
            )
        if executor is None:
            executor = build_executor(settings, inventory, api_url)
            undo.callback(close_quietly, "the executor", executor.close)
        own = inventory.source in ("nvml", "fake")  # GPUs this host read: their UUIDs are known
        uuids = {n.name: [g.uuid for g in n.gpus] for n in inventory.nodes} if own else None
        with db.session() as session:
            cluster_service.replace_inventory(
                session, executor.inventory().nodes, uuids, fake=inventory.source == "fake"
            )
            over = cluster_service.over_committed(session)
        log_over_commits(over)  # GPUs reported smaller than the jobs on them hold
        metrics = ServerMetrics(db, inventory)
        state = ServerState(
            settings, db, executor, inventory, metrics, follow_timeout=follow_timeout
        )
        tracers = state.tracers = WarmTracers(settings.estimate_warm_workers)
        undo.callback(close_quietly, "the warm tracers", tracers.close)
        checked = _health_loop(settings, db, inventory, program)
        reconciler = Reconciler(
            db, executor, settings, metrics=metrics, preempt_grace=preempt_grace, health=checked
        )
        state.wake = reconciler.wake
        state.usage_half_life = usage_half_life(reconciler.policy)
        metrics.set_usage_half_life(state.usage_half_life)
        sender = WebhookSender(db)
        undo.callback(close_quietly, "the webhook sender", sender.stop)
        state.webhooks = sender
        meter = energy_meter(inventory) if settings.energy_interval > 0 else None
        metered = (
            None
            if meter is None
            else EnergyLoop(
                db,
                meter,
                interval=settings.energy_interval,
                report=metrics.set_energy,
                opener=lambda: energy_meter(inventory),  # a lifespan run again
            )
        )
        if metered is not None:
            undo.callback(close_quietly, "the energy meter", metered.stop)
        app = _app(state, reconciler, sender, metered, checked, start_loops, max_body_bytes)
        undo.pop_all()  # made whole: the app's lifespan closes them from now on
    return app


LEFT_SHOWN = 10
"""Jobs :func:`say_left_running` names at most (the rest counted)."""


def say_left_running(db: Database) -> None:
    """Log, as a control plane's loops stop, the jobs it leaves running: stopping it stops
    no job (docs/deploy.md, "Restarts lose nothing"), and the control plane started next on
    its home adopts them. A database that cannot be read is said too: they run on all the
    same."""
    try:
        with db.read_session() as session:
            query = select(Job.id).where(Job.state.in_(HOLDING)).order_by(Job.seq)
            running = list(session.scalars(query))
    except SQLAlchemyError as exc:
        log.info(
            "stopping: the running jobs keep running (the database could not say which: %s)",
            str(getattr(exc, "orig", None) or exc).strip().splitlines()[0],
        )
        return
    if not running:
        log.info("stopping: no job is running")
        return
    shown = ", ".join(running[:LEFT_SHOWN])
    more = f" and {len(running) - LEFT_SHOWN} more" if len(running) > LEFT_SHOWN else ""
    log.info(
        "stopping: %d running job(s) keep running (%s%s): stopping the control plane stops "
        "no job; the one started next on this home adopts them",
        len(running),
        shown,
        more,
    )


def _renew(state: ServerState) -> None:
    """Make again what a lifespan's end closed for good, for the next lifespan: the warm
    tracers (as many spares as the settings say) and the token-use writes."""
    if state.tracers is not None:
        state.tracers = WarmTracers(state.settings.estimate_warm_workers)
    if state.token_writes.closed:
        state.token_writes = BackgroundWrites()


def _app(
    state: ServerState,
    reconciler: Reconciler,
    sender: WebhookSender,
    metered: EnergyLoop | None,
    checked: HealthLoop | None,
    start_loops: bool,
    max_body_bytes: int,
) -> FastAPI:
    """The FastAPI app of :func:`create_app`'s parts: its lifespan starts the loops (when
    ``start_loops``) and, at its end or when one of them fails to start, stops them and
    closes the tracers, the executor and the database, each whatever the others raise.

    A lifespan run again (a test client entered twice, an embedding app restarting it)
    works with new resources in place of those the last one closed: new warm tracers and
    token-use writes, and the NVML handles of the energy meter and the health check opened
    again (:meth:`EnergyLoop.reopen`, :meth:`HealthLoop.reopen`). It ran without them
    before: every estimate failed on the closed tracers, no token's use was stored any
    more, and every energy and health pass failed on the closed handles."""
    loops: list[Reconciler | WebhookSender | EnergyLoop | HealthLoop] = [reconciler, sender]
    loops += [loop for loop in (metered, checked) if loop is not None]
    executor, db, metrics = state.executor, state.db, state.metrics
    ended = False
    """Whether a lifespan has ended (closed what the next one must make again)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        nonlocal ended
        try:
            if ended:
                _renew(state)
                for handled in (metered, checked):
                    if handled is not None:
                        handled.reopen()
            if start_loops:
                for loop in loops:
                    loop.start()
            yield
        finally:
            ended = True
            for loop in loops:
                close_quietly(f"the {type(loop).__name__}", loop.stop)
            say_left_running(db)  # the loops stopped: what runs now runs on without them
            tracers = state.tracers
            if tracers is not None:
                close_quietly("the warm tracers", tracers.close)
            close_quietly("the executor", executor.close)
            close_quietly("the token-use writes", state.close_token_writes)
            close_quietly("the database's connections", db.dispose)

    app = FastAPI(
        title="danlu",
        version=version(),
        description="danlu control plane: jobs, projects, cluster, users (docs/api.md).",
        openapi_url=f"{API}/openapi.json",
        docs_url=f"{API}/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.danlu = state
    app.state.reconciler = reconciler
    app.state.health = checked
    app.state.energy = metered
    app.add_middleware(GuardBody, limit=max_body_bytes)
    app.add_middleware(RejectNul)
    app.add_middleware(NoSniff)  # the last added runs first: its refusals get it too
    app.add_exception_handler(DanluError, _danlu_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(NoToken, _no_token)
    app.add_exception_handler(OperationalError, _database_error)
    app.add_exception_handler(Exception, _internal_error)
    app.include_router(admin.router, prefix=API)
    app.include_router(jobs.router, prefix=API)
    app.include_router(events.router, prefix=API)
    app.include_router(sweeps.router, prefix=API)
    app.include_router(webhooks.router, prefix=API)
    app.include_router(dashboard.router)

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4")

    return app
