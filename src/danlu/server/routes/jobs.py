"""``/api/v1/jobs``: submit, list, get, cancel, rerun, events, why, stopping, logs, metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from danlu.core.errors import SpecError
from danlu.core.metric_record import parse_json
from danlu.core.spec import JobSpec, check_limits, parse_spec
from danlu.core.values import MAX_INT, check_values
from danlu.executors import Handle, UnknownHandleError
from danlu.server.db import Job, User
from danlu.server.errors import ConflictError, PermissionDenied
from danlu.server.routes.deps import (
    Caller,
    ServerState,
    State,
    body_named,
    checked_name,
    single_valued,
)
from danlu.server.routes.estimation import resolve_memory, submission_notes
from danlu.server.routes.schemas import (
    TERMINAL,
    AcceptedOut,
    ChangedOut,
    EventOut,
    JobOut,
    JobPatch,
    LogRunOut,
    MetricsIn,
    StoppingOut,
    SubmittedOut,
    WhyOut,
    event_out,
    job_out,
    metric_out,
)
from danlu.server.run_as import check_account
from danlu.server.services import events, job_changes, jobs, metrics, submission, users
from danlu.server.services.cluster import load_cluster

router = APIRouter(prefix="/jobs", tags=["jobs"], dependencies=[Depends(single_valued)])
LOG_CHUNK = 1 << 20
METRICS_CURSOR_HEADER = "X-Danlu-Metrics-Cursor"
"""The header of ``GET /jobs/{id}/metrics``: the ``after_id`` for the records after these."""
COUNT_HEADER = "X-Danlu-Count"
"""The header of ``GET /jobs?count=true``: how many jobs its filters match, its pages together."""
METRICS_NEXT_HEADER = "X-Danlu-Metrics-Next"
"""The header of a page by step of ``GET /jobs/{id}/metrics``: the ``next`` of the page after
it (:class:`~danlu.server.services.metrics.StepPosition`)."""
FOLLOW_POLL = 0.25
TOKEN_RECHECK = 5.0
"""Seconds between two checks, in a log follow, that the token it was opened with still
works: a follow stops within that once the token is revoked (``danlu user revoke``)."""
TRUNCATED_NOTE = b"[danlu: the log was truncated; following it from its start]\n"
"""The line a log follow writes where the log became shorter than what it had read (a
``copytruncate`` logrotate, a job that opened its log again with ``"w"``), before it
sends the log again from its first byte."""


def _check_spec(spec: JobSpec) -> None:
    """Before any trace: what the store and a launch can take (the service checks again)."""
    # Python mode: the JSON mode writes a lone surrogate in a key as replacement characters
    check_values(spec.model_dump())
    check_limits(spec)


class SpecRoute(APIRoute):
    """The route of a job submission: a body FastAPI refuses as a :class:`JobSpec` is refused
    as :func:`parse_spec` refuses it, naming the field and the fix (``did you mean
    priority?``), as ``POST /sweeps`` and the CLI refuse one; pydantic's own words said no
    fix. The route keeps its JobSpec body in the OpenAPI schema. A body that is no mapping
    (not JSON, a list) keeps the app's answer, which names ``body``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def spec_errors(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                in_body = all(error["loc"][:1] == ("body",) for error in exc.errors())
                if in_body and isinstance(exc.body, dict):
                    try:  # raises the SpecError of the field pydantic refused
                        parse_spec(exc.body)
                    except SpecError as refused:
                        raise body_named(refused) from None
                raise

        return spec_errors


def submit_job(spec: JobSpec, user: Caller, state: State) -> dict[str, Any]:
    """Validate and admit a job spec; 422 names the field of an invalid or unfittable spec.
    The reply is the new Job with the submission's ``notes`` (how ``gpu_memory: auto`` was
    resolved, the model family inferred), the words ``POST /sweeps`` gives in its own, which
    the job's ``pending_reason`` tells too."""
    return _submitted(spec, user, state)


def _submitted(spec: JobSpec, user: User, state: ServerState, told: str = "") -> dict[str, Any]:
    """:func:`submit_job`'s work, ``told`` in the new job's first event after who submitted
    it (a rerun's: ``rerun of ID``)."""
    _check_spec(spec)
    with state.db.read_session() as session:
        cluster = load_cluster(session)
    # no transaction
    estimate, micro = resolve_memory(
        spec,
        cluster,
        state.estimate_timeout,
        state.tracers,
        state.settings.trace_module_names,
    )
    with state.db.session() as session:
        job = jobs.submit(
            session,
            spec,
            user,
            gpu_memory=estimate.gpu_memory,
            micro_batch_limit=micro,
            family=estimate.family,
            max_unfinished=state.settings.max_jobs_per_user,
            told=told,
        )
        check_account(state.settings, job.user.account)  # DANLU_RUN_AS=user: its OS account
        notes = submission_notes(spec, estimate)
        submission.add_notes(job, notes)
        out = {**job_out(job), "notes": notes}
    if state.wake is not None:
        state.wake()
    return out


router.add_api_route(
    "",
    submit_job,
    methods=["POST"],
    status_code=201,
    response_model=SubmittedOut,
    summary="Submit a job",
    route_class_override=SpecRoute,
)


@router.get("", response_model=list[JobOut], summary="List jobs, newest first")
def list_jobs(
    user: Caller,
    state: State,
    response: Response,
    states: Annotated[
        list[str] | None, Query(alias="state", description="a job state; repeat for several")
    ] = None,
    project: Annotated[str | None, Query(max_length=64)] = None,
    owner: Annotated[str | None, Query(alias="user", max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
    since: Annotated[float | None, Query(ge=0, allow_inf_nan=False)] = None,
    name: Annotated[str | None, Query(max_length=128)] = None,
    before_id: Annotated[str | None, Query(max_length=32)] = None,
    order: Annotated[Literal["newest", "queue"], Query()] = "newest",
    count: bool = False,
) -> list[dict[str, Any]]:
    """Jobs filtered by state(s), project and user, submitted at or after ``since`` (POSIX
    seconds), named like ``name`` (``*`` any characters, ``?`` one); non-admins see only
    their own. ``before_id`` (the last job of the page before): only the jobs submitted
    before it, so that jobs submitted meanwhile shift no page (``offset`` counts from the
    newest job, which they change). ``order=queue``: highest priority first, then oldest
    first (no ``before_id``). ``count=true``: the ``X-Danlu-Count`` header is how many jobs
    the filters match, on every page together."""
    with state.db.read_session() as session:
        filters: dict[str, Any] = {
            "viewer": user,
            "states": states,
            "project": project,
            "user": owner,
            "since": since,
            "name": name,
        }
        query = jobs.listed_jobs(session, **filters)  # the filters checked once
        rows = jobs.page_of_jobs(
            session,
            query,
            viewer=user,
            limit=limit,
            offset=offset,
            before_id=before_id,
            order=order,
        )
        if count:
            response.headers[COUNT_HEADER] = str(jobs.count_jobs(session, query))
        return jobs_out(session, rows)


def jobs_out(session: Session, rows: list[Job]) -> list[dict[str, Any]]:
    """``rows`` as the API's Job objects, each ended one with its ``end_reason`` (read for
    all of them in one query)."""
    ended = jobs.end_reasons(session, rows)
    return [job_out(job, ended.get(job.id)) for job in rows]


def _run_of(state: ServerState, job_id: str, user: User, *, logs: bool = False) -> Handle:
    """The current run of a job the caller may see (its id comes from the store); for its
    ``logs``, a :class:`ConflictError` once the retention deleted them."""
    checked_name(job_id, "job")
    with state.db.read_session() as session:
        job = jobs.get_job(session, job_id, user)
        if logs and job.purged_at is not None:
            raise ConflictError(
                f"job {job.id}: its log was deleted by the retention (DANLU_RETENTION_DAYS) "
                f"at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(job.purged_at))}"
            )
        return Handle(job.id, job.attempt)


@router.get("/{job_id}", response_model=JobOut, summary="Get a job (id or unique prefix)")
def get_job(job_id: str, user: Caller, state: State) -> dict[str, Any]:
    """One job."""
    checked_name(job_id, "job")
    with state.db.read_session() as session:
        (out,) = jobs_out(session, [jobs.get_job(session, job_id, user)])
        return out


@router.patch("/{job_id}", response_model=ChangedOut, summary="Change an unfinished job")
def update_job(job_id: str, body: JobPatch, user: Caller, state: State) -> dict[str, Any]:
    """Change a job (its owner or an admin): its ``priority`` (the next round ranks it
    anew), ``time_limit`` and ``deadline`` in any unfinished state (``"none"`` removes one),
    its ``resources`` and ``max_restarts`` while it is PENDING (409 naming them otherwise),
    validated as at submission (new resources against the inventory and the quotas too:
    422 naming the field), an event recording each change; ``held``: hold a job (not
    scheduled until released; a running one is preempted by checkpoint first) or release
    it. The reply's ``notes`` tell what the change did besides (a new ``gpu_memory: auto``
    resolved, a limit already passed)."""
    checked_name(job_id, "job")
    change = job_changes.JobChange(
        priority=body.priority,
        time_limit=body.time_limit,
        deadline=body.deadline,
        max_restarts=body.max_restarts,
        resources=body.resources,
    )
    resolved = _resolved(state, job_id, user, change) if change.resources is not None else None
    notes: list[str] = []
    with state.db.session() as session:
        job = jobs.get_job(session, job_id, user)
        if change.given():
            changed = job_changes.change_job(session, job.id, change, user, resolved=resolved)
            job, notes = changed.job, changed.notes
        if body.held is not None:
            job = jobs.hold(session, job.id, body.held, user)
        (out,) = jobs_out(session, [job])  # an ended job's end_reason too
    if state.wake is not None:
        state.wake()
    return {**out, "notes": notes}


def _resolved(
    state: ServerState, job_id: str, user: User, change: job_changes.JobChange
) -> job_changes.Resolved | None:
    """The estimate of a queued job's new resources (``gpu_memory: auto``, the micro-batch
    limit), made as a submission's is, outside any transaction; None when ``change`` makes
    its spec no different."""
    with state.db.read_session() as session:
        spec = job_changes.changed_spec(jobs.get_job(session, job_id, user), change)
        cluster = load_cluster(session)
    if spec is None:
        return None
    _check_spec(spec)
    estimate, micro = resolve_memory(
        spec,
        cluster,
        state.estimate_timeout,
        state.tracers,
        state.settings.trace_module_names,
    )
    notes = submission_notes(spec, estimate)
    return job_changes.Resolved(spec.resources, estimate.gpu_memory, micro, notes)


@router.post("/{job_id}/cancel", response_model=JobOut, summary="Cancel a job")
def cancel_job(job_id: str, user: Caller, state: State) -> dict[str, Any]:
    """A queued job is cancelled now; a running one is stopped by the reconcile loop."""
    checked_name(job_id, "job")
    with state.db.session() as session:
        (out,) = jobs_out(session, [jobs.cancel_job(session, job_id, user)])
    if state.wake is not None:
        state.wake()
    return out


@router.post(
    "/{job_id}/rerun", status_code=201, response_model=SubmittedOut, summary="Submit a job again"
)
def rerun_job(
    job_id: str,
    user: Caller,
    state: State,
    changes: Annotated[dict[str, Any] | None, Body()] = None,
) -> dict[str, Any]:
    """Submit a finished job's spec again as a new job (from the start, unless its spec
    names a ``checkpoint_dir`` with checkpoints in it), without its dependencies; its owner
    stays the same. The body, when given, changes fields of the spec, written as a job spec
    writes them (``{"resources": {"gpus": 2}, "time_limit": "4h", "env": {"SEED": "2"}}``: a
    mapping is merged into the spec's, any other value replaces the field), validated as a
    submission is (422 naming the field); as in ``PATCH /jobs/{id}``, a ``time_limit`` or
    ``deadline`` given as null is left out (the job's is kept) and ``"none"`` (or
    ``"UNLIMITED"``) removes it. 409 for a job that has not finished. The reply
    carries the new submission's ``notes``, as ``POST /jobs``'s does (its ``gpu_memory:
    auto`` is resolved again); the new job's first event names the job it reruns and the
    fields changed."""
    checked_name(job_id, "job")
    with state.db.read_session() as session:
        job = jobs.get_job(session, job_id, user)
        spec, rerun_of = jobs.rerun_spec(job), job.id
    if changes:
        try:
            spec = job_changes.rerun_with(spec, changes)
        except SpecError as exc:
            raise body_named(exc) from None
    return _submitted(spec, user, state, job_changes.rerun_told(rerun_of, changes))


@router.get("/{job_id}/events", response_model=list[EventOut], summary="A job's events")
def job_events(
    job_id: str,
    user: Caller,
    state: State,
    after_id: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    tail: bool = False,
) -> list[dict[str, Any]]:
    """State changes of a job in order, with their reasons, after event ``after_id``; at
    most ``limit``, the oldest of them (``tail``: the newest, oldest first). Settled events
    only, as ``GET /events`` (:func:`~danlu.server.services.settled.settled_id`): following
    with the last id seen as ``after_id`` misses none."""
    checked_name(job_id, "job")
    with state.db.read_session() as session:
        job = jobs.get_job(session, job_id, user)
        rows = events.list_events(session, job.id, after_id=after_id, limit=limit, tail=tail)
        return [event_out(e) for e in rows]


@router.get("/{job_id}/why", response_model=WhyOut, summary="Why a job is where it is")
def job_why(job_id: str, user: Caller, state: State) -> dict[str, Any]:
    """One sentence: why the job is pending (or running, or finished)."""
    checked_name(job_id, "job")
    with state.db.read_session() as session:
        job = jobs.get_job(session, job_id, user)
        return {"id": job.id, "state": job.state, "reason": jobs.why(session, job)}


@router.get(
    "/{job_id}/stopping", response_model=StoppingOut, summary="Why a job's run is being stopped"
)
def job_stopping(job_id: str, user: Caller, state: State, request: Request) -> dict[str, Any]:
    """Why the control plane is stopping the job's run now (a cancel, its deadline or time
    limit, a preemption, a drain, a hold, a move), or ``reason`` null when it is stopping
    none: what danlu.train asks on SIGTERM, with its run's token, to say in its log why it
    checkpoints and exits (:func:`~danlu.server.services.jobs.stop_reason`)."""
    checked_name(job_id, "job")
    with state.db.read_session() as session:
        job = jobs.get_job(session, job_id, user)
        run_of = getattr(request.state, "job_token", None)
        if run_of is not None and job.id != run_of:  # a prefix resolved to another job
            raise PermissionDenied(
                f"this token was issued to a run of job {run_of}: it may only read that job's stop"
            )
        return {"id": job.id, "reason": jobs.stop_reason(session, job)}


def _read_log(
    state: ServerState, run: Handle, offset: int, limit: int = LOG_CHUNK
) -> tuple[bytes, int]:
    # The handle is built from the stored job's id: a request string never names a file.
    try:
        return state.executor.logs(run, offset, limit)
    except UnknownHandleError:
        return b"", offset


def _tail_offset(state: ServerState, run: Handle, tail: int) -> int:
    """Where the last ``tail`` bytes of the run's log start."""
    try:
        return max(0, state.executor.log_size(run) - tail)
    except UnknownHandleError:
        return 0


def _log_shrunk(state: ServerState, run: Handle, offset: int) -> bool:
    """Whether the run's log now holds fewer than ``offset`` bytes: it was truncated since
    a follow read up to ``offset`` (blocking: the executor looks its size up)."""
    if offset == 0:
        return False
    try:
        return state.executor.log_size(run) < offset
    except UnknownHandleError:
        return False


def _current_run(state: ServerState, job_id: str) -> tuple[bool, Handle]:
    """Whether the job is terminal, and its current run (blocking: a store read)."""
    with state.db.read_session() as session:
        job = jobs.get_job(session, job_id)
        return job.state in TERMINAL, Handle(job.id, job.attempt)


def _token_live(state: ServerState, token: str) -> bool:
    """Whether ``token`` still works (not revoked, its user not disabled; blocking: a store
    read)."""
    with state.db.read_session() as session:
        return users.usable_token(session, token)


async def _follow(
    state: ServerState, run: Handle, offset: int, token: str | None = None
) -> AsyncIterator[bytes]:
    """The run's log from ``offset`` as it grows, until the job is terminal (then what its
    run wrote before the exit), ``state.follow_timeout`` passes or ``token``, the one the
    follow was opened with, is revoked (checked every :data:`TOKEN_RECHECK` seconds). It
    waits on the event loop and runs each blocking read in the thread pool only while it
    reads: a follower of a quiet job holds no worker thread (40 of them once held every
    one, and no other route, not even ``/health``, was answered until they ended). The
    timeout holds while the log grows too: it was checked only once a read found nothing
    new, so the follow of a job writing faster than its reader took it never ended. A log
    found shorter than what was read (truncated: :func:`_log_shrunk`) is followed again
    from its start, after :data:`TRUNCATED_NOTE` on a line of its own; the follow kept its
    offset past the log's end and showed nothing more."""
    deadline = time.monotonic() + state.follow_timeout
    checked = time.monotonic()
    line_open = False  # the last byte sent ends no line
    while True:
        if token is not None and time.monotonic() - checked >= TOKEN_RECHECK:
            if not await run_in_threadpool(_token_live, state, token):
                return  # revoked: nothing more goes to whoever holds it
            checked = time.monotonic()
        data, offset = await run_in_threadpool(_read_log, state, run, offset)
        if data:
            yield data
            line_open = not data.endswith(b"\n")
            if time.monotonic() >= deadline:  # a log that keeps growing ends a follow too
                return
            continue
        if await run_in_threadpool(_log_shrunk, state, run, offset):
            yield (b"\n" if line_open else b"") + TRUNCATED_NOTE
            offset, line_open = 0, False
            continue
        done, current = await run_in_threadpool(_current_run, state, run.job_id)
        if current != run:  # a new run (restart, resume) appends to the same log
            run = current
            continue
        if done:
            while True:  # what the run wrote between the last read and its exit
                data, offset = await run_in_threadpool(_read_log, state, run, offset)
                if not data:
                    return
                yield data
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(FOLLOW_POLL)


@router.get(
    "/{job_id}/logs",
    summary="A job's log (text/plain)",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
)
def job_logs(
    job_id: str,
    user: Caller,
    state: State,
    request: Request,
    offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
    follow: bool = False,
    tail: Annotated[int | None, Query(ge=1, le=LOG_CHUNK)] = None,
) -> Response:
    """The job's output from byte ``offset``; ``X-Danlu-Log-Offset`` is the next offset.
    ``tail``: its last ``tail`` bytes instead (at most 1 MiB; not with ``offset``), where a
    follow then starts too. With ``follow=true`` the body streams until the job is
    terminal (no ``X-Danlu-Log-Offset``: the headers go before the body), or until the
    caller's token is revoked."""
    if tail is not None and offset:
        raise SpecError("tail", "give either offset or tail, not both")
    run = _run_of(state, job_id, user, logs=True)
    limit = LOG_CHUNK
    if tail is not None:
        offset, limit = _tail_offset(state, run, tail), tail
    if follow:
        _, token = get_authorization_scheme_param(request.headers.get("authorization"))
        stream = _follow(state, run, offset, token or None)
        return StreamingResponse(stream, media_type="text/plain")
    data, next_offset = _read_log(state, run, offset, limit)
    return Response(data, media_type="text/plain", headers={"X-Danlu-Log-Offset": str(next_offset)})


@router.get(
    "/{job_id}/logs/runs",
    response_model=list[LogRunOut],
    summary="Where each run of a job begins in its log",
)
def job_log_runs(job_id: str, user: Caller, state: State) -> list[dict[str, Any]]:
    """The job's runs that the executor still knows of (its records of them), oldest first,
    each with the byte ``offset`` of the job's log (all its runs' output, appended) where its
    output begins and when it was launched: ``danlu logs`` marks where each attempt begins
    by them. Empty where the executor keeps no such record, or none of the job's runs."""
    run = _run_of(state, job_id, user, logs=True)
    try:
        starts = state.executor.log_runs(run)  # the handle comes from the stored job's id
    except UnknownHandleError:
        return []
    return [{"attempt": r.attempt, "offset": r.offset, "started_at": r.started_at} for r in starts]


class MetricsRequest(Request):
    """A metrics report's request: its JSON body read by
    :func:`~danlu.core.metric_record.parse_json`, so that an integer of more digits than
    Python converts (``json.loads`` raises ``ValueError`` for the whole body, which FastAPI
    answers with a bare 400) reaches the checks of its record, which answer the 422 naming
    its field (``metrics.<i>.<key>``)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class MetricsRoute(APIRoute):
    """The route of a metrics report: FastAPI reads its body as a :class:`MetricsRequest`
    (FastAPI's documented way to read a route's body otherwise)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def read_as_metrics(request: Request) -> Response:
            return await handler(MetricsRequest(request.scope, request.receive))

        return read_as_metrics


def post_metrics(
    job_id: str, body: MetricsIn, user: Caller, state: State, request: Request
) -> dict[str, int | None]:
    """Store metric records (with the token of the job's run, its owner's token or an
    admin's). The reply carries the job's current global batch size (the scheduler's
    latest choice). A run's token is refused (409) once the job has finished: what it
    sends then would rewrite a finished job's records (its ``checkpoint_step``). Any token
    is refused (409, by :func:`metrics.ingest`) once the retention deleted the job's
    records: nothing would ever delete new ones. With an ``Idempotency-Key`` header (422
    naming it when it is not one, :func:`metrics.check_key`), a request the job stored
    under that key already is answered as then (the count it stored) and stores nothing:
    danlu.train's reporter sends a request again, with its key, when it got no reply. The
    records are stored as the attempt of the run whose token sent them, else the job's
    current attempt (:func:`metrics.reporting_attempt`); a finished job's as the attempt of
    its last run that reported, so that they supersede none of its records."""
    checked_name(job_id, "job")
    key = request.headers.get(metrics.KEY_HEADER)
    if key is not None:
        metrics.check_key(key)  # before any transaction
    # metrics.ingest checks every value (NaN is stored as null, not refused: a diverged loss
    # refused the whole batch, and the job's reporter sent it again for good)
    with state.db.session() as session:
        job = jobs.get_job(session, job_id, user)
        if job.user_id != user.id and not user.is_admin:
            raise PermissionDenied(f"job {job.id} belongs to another user")
        run_of = getattr(request.state, "job_token", None)
        if run_of is not None and job.id != run_of:  # a prefix resolved to another job
            raise PermissionDenied(
                f"this token was issued to a run of job {run_of}: it may only report "
                "that job's metrics"
            )
        if run_of is not None and job.state in TERMINAL:
            raise ConflictError(
                f"job {job.id} has finished ({job.state}): its run's token reports no more "
                "metrics; use a user's token to add records to a finished job"
            )
        accepted = metrics.ingest(session, job, body.metrics, key=key, run_token=run_of is not None)
        return {"accepted": accepted, "batch_size": job.batch_size}


router.add_api_route(
    "/{job_id}/metrics",
    post_metrics,
    methods=["POST"],
    response_model=AcceptedOut,
    summary="Report training metrics",
    openapi_extra={
        "parameters": [
            {
                "name": metrics.KEY_HEADER,
                "in": "header",
                "required": False,
                "description": "A random id of this request (1-128 of A-Z a-z 0-9 . _ : -), "
                "the same when the same records are sent again: a repeat of a key the job "
                "stored within a day gets the same reply and stores nothing",
                "schema": {"type": "string", "maxLength": metrics.MAX_KEY},
            }
        ]
    },
    route_class_override=MetricsRoute,
)


@router.get("/{job_id}/metrics", response_model=list[dict[str, Any]], summary="Job metrics")
def get_metrics(
    job_id: str,
    user: Caller,
    state: State,
    response: Response,
    after_step: Annotated[int, Query(ge=-1, le=MAX_INT)] = -1,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    tail: bool = False,
    after_id: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
    superseded: bool = False,
    next_page: Annotated[str | None, Query(alias="next")] = None,
) -> list[dict[str, Any]]:
    """Metric records with ``step > after_step``, by step: the first ``limit`` (never ending
    inside a step: the records of a step the limit would cut come whole in the next page,
    read with ``after_step`` = this page's last step; a step alone over ``limit`` comes
    whole), or the last with ``tail=true``; those a later attempt of the job went back over
    (it resumed from an earlier checkpoint and reported their steps again) left out unless
    ``superseded=true``, which lists them too, each record saying its ``attempt`` and
    whether it is ``superseded``. With ``after_id``, every record stored after that cursor,
    by arrival, with those two fields. The ``X-Danlu-Metrics-Cursor`` header is the
    ``after_id`` of what comes next: the last record returned (with ``after_id``), else the
    job's newest record when the request began (no later one is in the page). Both modes
    stop below a record still being stored (on PostgreSQL ids are taken at insert, not at
    commit: :func:`~danlu.server.services.settled.settled_id`), so a follower misses none.
    A page by step holds at most 10,000 records, even of one step
    (:func:`~danlu.server.services.metrics.list_metrics`): the ``X-Danlu-Metrics-Next``
    header of a page by step (without ``after_id``) is the ``next`` that reads on after its
    last record, inside its step too (where it began when it holds none); a page read with
    ``next`` holds the records after that position. Reading every record: ``next`` = the
    header of the page before, until a page holds none."""
    checked_name(job_id, "job")
    after = None if next_page is None else metrics.step_position(next_page)
    with state.db.read_session() as session:
        job = jobs.get_job(session, job_id, user)
        page = metrics.read_page(
            session,
            job.id,
            after_step=after_step,
            limit=limit,
            tail=tail,
            after_id=after_id,
            superseded=superseded,
            after=after,
        )
        rows = page.rows
        response.headers[METRICS_CURSOR_HEADER] = str(page.cursor)
        if page.following is not None:
            response.headers[METRICS_NEXT_HEADER] = page.following.text()
        if not superseded and after_id is None:
            return [metric_out(m) for m in rows]
        seen = metrics.supersession(session, job.id)
        return [metric_out(m, seen.superseded(m.attempt, m.step, m.rollback)) for m in rows]
