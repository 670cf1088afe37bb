"""Jobs: submit (with admission), list, get, cancel, and the ONE state change; why a job is
where it is, and the stops its limits call for, are :mod:`~danlu.server.services.job_reasons`'s
(re-exported here).

:func:`change_state` (and :func:`change_state_batched`, its form for a scheduling round) is
the only code that writes ``Job.state``; both check the edge against
:data:`danlu.core.state.TRANSITIONS` and record a job event in the same transaction.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.errors import PlacementError, SpecError
from danlu.core.spec import JobSpec, check_limits, parse_spec
from danlu.core.state import JobState, check_transition, restart_backoff
from danlu.core.sweep import MEMBERSHIP_ENV
from danlu.core.units import format_duration
from danlu.server.db.models import Job, JobEvent, JobRun, User
from danlu.server.errors import ConflictError
from danlu.server.services import dependencies, pending_reasons, submission, webhooks
from danlu.server.services.bulk import EventBatch, flush_jobs
from danlu.server.services.common import by_id, lock_row, resolve_now, state_values

# re-exported: they lived here, and callers of the job bookkeeping find them here
from danlu.server.services.job_reasons import CHECKPOINT_DIR_FAULT as CHECKPOINT_DIR_FAULT
from danlu.server.services.job_reasons import LIMIT_STOPS as LIMIT_STOPS
from danlu.server.services.job_reasons import NODE_FAULT as NODE_FAULT
from danlu.server.services.job_reasons import NOT_LAUNCHED as NOT_LAUNCHED
from danlu.server.services.job_reasons import UNLAUNCHED_CAUSES as UNLAUNCHED_CAUSES
from danlu.server.services.job_reasons import WAITS_FOR_LAUNCH as WAITS_FOR_LAUNCH
from danlu.server.services.job_reasons import cancellations as cancellations
from danlu.server.services.job_reasons import end_reasons as end_reasons
from danlu.server.services.job_reasons import expired as expired
from danlu.server.services.job_reasons import not_launched as not_launched
from danlu.server.services.job_reasons import over_time as over_time
from danlu.server.services.job_reasons import run_time_at as run_time_at
from danlu.server.services.job_reasons import shift_clocks as shift_clocks
from danlu.server.services.job_reasons import stop_reason as stop_reason
from danlu.server.services.job_reasons import waits_for_launch as waits_for_launch
from danlu.server.services.job_reasons import why as why
from danlu.server.services.projects import HOLDING
from danlu.server.services.users import check_listed_names, check_own_listing, revoke_job_tokens

MAX_LIMIT = 1000
RESTART_BACKOFF_SECONDS = 10.0
NODE_RETRY_CAP_SECONDS = 600.0
"""Longest wait before a job is launched again after launches the node failed."""
ShareDict = dict[str, Any]


def new_job_id() -> str:
    """A fresh public job id: 12 hex digits."""
    return secrets.token_hex(6)


def job_spec(job: Job) -> JobSpec:
    """The stored spec of ``job`` as a :class:`JobSpec` (as accepted when it was submitted)."""
    return parse_spec(job.spec, stored=True)


def rerun_spec(job: Job) -> JobSpec:
    """The spec to submit ``job`` again as a new job (``POST /jobs/{id}/rerun``): its own,
    without its dependencies (they were met or not for the first run) and without what made
    it a sweep's trial (``DANLU_SWEEP_ID``, ``DANLU_TRIAL``: a rerun is not one); a trial's
    parameters and an array task's index stay, so that it does the same work. A job that has
    not finished is a :class:`ConflictError`: cancel it first, or it would run twice."""
    if not JobState(job.state).terminal:
        raise ConflictError(
            f"job {job.id} is {job.state}; a rerun takes a finished job (cancel it first)"
        )
    spec = job_spec(job)
    env = {key: value for key, value in spec.env.items() if key not in MEMBERSHIP_ENV}
    return spec.model_copy(update={"depends_on": [], "env": env})


def submit(
    session: Session,
    spec: JobSpec | Mapping[str, Any],
    user: User,
    *,
    gpu_memory: int | None = None,
    micro_batch_limit: int | None = None,
    family: str | None = None,
    max_unfinished: int = 0,
    now: float | None = None,
    told: str = "",
) -> Job:
    """Validate and admit ``spec`` for ``user`` and queue it as PENDING.

    ``gpu_memory`` overrides the per-GPU bytes (the caller's estimate for ``gpu_memory:
    auto``, computed outside the transaction); ``auto`` without it means whole GPUs.
    ``micro_batch_limit``: the largest per-GPU micro-batch the memory model predicts to fit
    (also estimated outside the transaction), or None. ``family``: the model family the
    trace recognised, stored as ``training.family`` when the spec says ``auto`` (which stays
    when it is None: the scheduler then treats the family as unknown). ``max_unfinished``:
    the unfinished jobs the job's owner may have (``DANLU_MAX_JOBS_PER_USER``; 0: any).
    ``told``: what its first event says after who submitted it (``rerun of 3f2a...``).
    Raises :class:`SpecError` (invalid field), :class:`AdmissionError` (can never fit the
    inventory or the project's quota, naming the field), :class:`PermissionDenied` (another
    owner than the caller, not an admin; an owner not a member of the project) or
    :class:`ConflictError` (the owner has ``max_unfinished`` unfinished jobs).
    """
    t = resolve_now(now)
    if isinstance(spec, JobSpec):
        check_limits(spec)
    parsed = spec if isinstance(spec, JobSpec) else parse_spec(dict(spec))
    admitted = submission.admit(
        session,
        parsed,
        user,
        gpu_memory=gpu_memory,
        micro_batch_limit=micro_batch_limit,
        family=family,
        max_unfinished=max_unfinished,
        now=t,
        told=told,
    )
    depends_on, waiting = dependencies.resolve_for(session, parsed.depends_on, user)
    job = submission.queue(
        session, admitted, new_job_id(), depends_on=depends_on, waiting=waiting, now=t
    )
    submission.announce(session, admitted, [job], t)
    return job


def get_job(session: Session, job_id: str, viewer: User | None = None) -> Job:
    """The job with id ``job_id`` (or a unique id prefix of 4+ characters).

    ``viewer``: a non-admin may see only their own jobs (else :class:`PermissionDenied`).
    """
    return by_id(session, Job, "job", job_id, viewer)


def locked_job(session: Session, job_id: str, viewer: User | None = None) -> Job:
    """:func:`get_job` with its row locked until the transaction ends, read again
    (:func:`~danlu.server.services.common.lock_row`): a change of one job (a request's, an
    expiry's) waits for a concurrent change of it to commit, the reconcile loop's included,
    and applies to what that one wrote instead of failing its version check."""
    return lock_row(session, Job, get_job(session, job_id, viewer).id)


NEWEST = "newest"
"""The order of a job listing by default: newest first (by submission)."""
QUEUE = "queue"
"""The order of a job listing nearest a start first: highest ``priority`` first, then in
submission order (as the dashboard's unfinished jobs list the queue; the policy's own ranking
may weigh more, such as fair shares)."""
LIST_ORDERS = (NEWEST, QUEUE)


def list_jobs(
    session: Session,
    *,
    viewer: User | None = None,
    states: Iterable[JobState | str] | None = None,
    project: str | None = None,
    user: str | None = None,
    limit: int = 100,
    offset: int = 0,
    since: float | None = None,
    name: str | None = None,
    before_id: str | None = None,
    order: str = NEWEST,
) -> list[Job]:
    """Jobs, newest first (``order`` :data:`QUEUE`: by priority, then oldest first),
    filtered as :func:`listed_jobs` says, a page of them as :func:`page_of_jobs` reads it."""
    query = listed_jobs(
        session, viewer=viewer, states=states, project=project, user=user, since=since, name=name
    )
    return page_of_jobs(
        session, query, viewer=viewer, limit=limit, offset=offset, before_id=before_id, order=order
    )


def page_of_jobs(
    session: Session,
    query: Select[Job],
    *,
    viewer: User | None = None,
    limit: int = 100,
    offset: int = 0,
    before_id: str | None = None,
    order: str = NEWEST,
) -> list[Job]:
    """A page of the jobs of ``query`` (:func:`listed_jobs`' for ``viewer``), newest first
    (``order`` :data:`QUEUE`: by priority, then oldest first). ``before_id``: only the jobs
    submitted before that one (a cursor: the last job of the page before, whose next page a
    job submitted meanwhile does not shift, as it shifts one read by ``offset``); a
    :class:`SpecError` naming it when the viewer has no job of that full id, or in the
    queue's order (which is not by submission: it pages by ``offset``)."""
    if not 1 <= limit <= MAX_LIMIT:
        raise SpecError("limit", f"must be between 1 and {MAX_LIMIT}")
    if offset < 0:
        raise SpecError("offset", "cannot be negative")
    if order not in LIST_ORDERS:
        raise SpecError("order", f"{order!r}: give {NEWEST} or {QUEUE}")
    if before_id is not None and order == QUEUE:
        raise SpecError(
            "before_id", f"a cursor of the order {NEWEST}; order {QUEUE} pages by offset"
        )
    if before_id is not None:
        query = query.where(Job.seq < _cursor_seq(session, before_id, viewer))
    ordered = (Job.priority.desc(), Job.seq) if order == QUEUE else (Job.seq.desc(),)
    return list(session.scalars(query.order_by(*ordered).limit(limit).offset(offset)))


def count_jobs(session: Session, query: Select[Job]) -> int:
    """How many jobs ``query`` (:func:`listed_jobs`') holds: all the pages of its listing."""
    return session.scalar(select(func.count()).select_from(query.subquery())) or 0


def listed_jobs(
    session: Session,
    *,
    viewer: User | None = None,
    states: Iterable[JobState | str] | None = None,
    project: str | None = None,
    user: str | None = None,
    since: float | None = None,
    name: str | None = None,
) -> Select[Job]:
    """The jobs in state(s) ``states``, of ``project`` and of the user named ``user``,
    submitted at or after ``since``, named like ``name`` (``*`` any characters, ``?`` one),
    unordered; a non-admin ``viewer`` sees only their own jobs: naming another ``user`` is
    refused (it read as that user having none), and naming a ``user`` or ``project`` that
    does not exist is a :class:`~danlu.server.errors.NotFoundError` naming it (a typo read
    as "no jobs")."""
    check_own_listing(viewer, user, "jobs")
    check_listed_names(session, project, user)
    query = select(Job)
    if states is not None:
        query = query.where(Job.state.in_(state_values(states)))
    if project is not None:
        query = query.where(Job.project.has(name=project))
    if user is not None:
        query = query.where(Job.user.has(name=user))
    if since is not None:
        query = query.where(Job.submitted_at >= since)
    if name is not None:
        query = query.where(Job.name.like(name_pattern(name), escape="\\"))
    if viewer is not None and not viewer.is_admin:
        query = query.where(Job.user_id == viewer.id)
    return query


def _cursor_seq(session: Session, job_id: str, viewer: User | None) -> int:
    """The submission order of job ``job_id`` (a full id) as a listing's ``before_id``; a
    non-admin ``viewer`` may name only their own jobs (the only ones they list)."""
    query = select(Job.seq).where(Job.id == job_id)
    if viewer is not None and not viewer.is_admin:
        query = query.where(Job.user_id == viewer.id)
    seq = session.scalar(query)
    if seq is None:
        raise SpecError(
            "before_id",
            f"no job {job_id[:40]!r}{'' if viewer is None or viewer.is_admin else ' of yours'}:"
            " pass the full id of the last job of the page before",
        )
    return int(seq)


def name_pattern(glob: str) -> str:
    """A shell-style name pattern (``train-*``, ``run-?``) as a SQL ``LIKE`` pattern with
    ``\\`` as its escape: ``%``, ``_`` and ``\\`` stand for themselves."""
    out = []
    for char in glob:
        if char in "%_\\":
            out.append("\\" + char)
        elif char == "*":
            out.append("%")
        elif char == "?":
            out.append("_")
        else:
            out.append(char)
    return "".join(out)


def flush_or_conflict(session: Session, job_id: str | None = None) -> None:
    """Flush; a lost optimistic-version race becomes a ConflictError (the caller rolls back).
    ``job_id``: the job changed, when only one was. The session's changed job rows are
    written first by :func:`~danlu.server.services.bulk.flush_jobs` (one statement per set
    of changed columns, not one per row), then the ORM flushes the rest."""
    try:
        flush_jobs(session, [obj for obj in session.dirty if isinstance(obj, Job)])
        session.flush()
    except (StaleDataError, ConflictError):
        what = f"job {job_id}" if job_id is not None else "a job of this change"
        raise ConflictError(f"{what} changed concurrently; retry") from None


def _new_attempt(job: Job) -> None:
    """Count a new run of ``job`` (a start or a move): ``attempt`` increments, and a null
    ``launched_attempt`` becomes 0, telling "not launched yet" from a run recorded before
    the column (:func:`not_launched`)."""
    job.attempt += 1
    if job.launched_attempt is None:
        job.launched_attempt = 0


def _release(job: Job, t: float) -> dict[str, Any] | None:
    """Account the service received on the current allocation up to ``t`` and drop it, with
    the measurement taken on it (keeping the progress it reported). Returns the
    :class:`~danlu.server.db.models.JobRun` row of the stretch that ends (None without one),
    for the caller to write. A run the executor never launched (:func:`not_launched`) is
    charged nothing: its stretch ends at its start (:func:`_charged_until`), and that empty
    stretch is no row."""
    run = None
    if job.moved_from is not None:  # only when set: a round's bulk UPDATE skips it else
        job.moved_from = None
    if job.allocation and job.last_start is not None:
        held = max(0.0, t - job.last_start)
        milli = sum(int(s["milli"]) for s in job.allocation)
        job.attained_service += held * milli / MILLI_PER_GPU
        job.run_time += held
        if held > 0 or not not_launched(job):  # a run never launched: no stretch
            run = {
                "job_id": job.id,
                "project_id": job.project_id,
                "user_id": job.user_id,
                "started_at": job.last_start,
                "ended_at": max(t, job.last_start),
                "gpu_milli": milli,
                "gpu_memory": sum(int(s["memory"]) for s in job.allocation),
            }
    job.allocation = None
    if job.observed:
        progress = job.observed.get("progress")
        job.observed = {"progress": progress} if progress is not None else None
    return run


def _charged_until(job: Job, t: float) -> float:
    """When a stop or move at ``t`` ends ``job``'s current stretch: ``t``, or its start for
    a run waiting for its launch (:func:`waits_for_launch`: its wait for GPUs another run
    held is no usage, as a stop before the launch charges none)."""
    if waits_for_launch(job) and job.last_start is not None:
        return min(t, job.last_start)
    return t


def change_state(
    session: Session,
    job: Job,
    new: JobState,
    reason: str,
    now: float | None = None,
    *,
    allocation: list[ShareDict] | None = None,
    exit_code: int | None = None,
    counted: bool = True,
    ran_until: float | None = None,
) -> JobEvent:
    """THE one function that changes a job's state: checks the edge, updates the bookkeeping
    (allocation, times, counters, backoff) and records a :class:`JobEvent`, all in the
    caller's transaction.

    ``allocation`` is required for a start (-> RUNNING). ``counted=False`` on -> RESTARTING
    counts no restart against the job and sets no backoff (the caller sets it).
    ``ran_until``: when the run that ends exited, if before ``now`` (its GPUs are charged
    up to then). Raises :class:`InvalidTransitionError` for an edge outside the table and
    :class:`ConflictError` if the row changed concurrently (the caller rolls back). A
    caller that changes many jobs at once uses :func:`change_state_batched`.
    """
    t = resolve_now(now)
    old, run = _transition(job, new, t, allocation, exit_code, counted, ran_until)
    row = {"job_id": job.id, "time": t, "old": old.value, "new": new.value, "reason": reason}
    event = JobEvent(**row)
    session.add(event)
    if run is not None:
        session.add(JobRun(**run))
    flush_or_conflict(session, event.job_id)
    webhooks.enqueue(session, [row | {"project_id": job.project_id, "user_id": job.user_id}])
    return event


def change_state_batched(
    job: Job,
    new: JobState,
    reason: str,
    now: float,
    events: EventBatch,
    *,
    allocation: list[ShareDict] | None = None,
) -> None:
    """:func:`change_state` for a caller that changes many jobs at once (a scheduling
    round): the same checks and bookkeeping, but nothing is flushed, and the event is added
    to ``events``, which the caller writes after flushing the jobs with
    :func:`flush_or_conflict` (:meth:`EventBatch.write`: one INSERT for all of them instead
    of one ORM object each); so is the stretch on GPUs it ends, if any."""
    old, run = _transition(job, new, now, allocation, None)
    events.add(job.id, now, old.value, new.value, reason)
    if run is not None:
        events.add_run(run)


def _transition(
    job: Job,
    new: JobState,
    t: float,
    allocation: list[ShareDict] | None,
    exit_code: int | None,
    counted: bool = True,
    ran_until: float | None = None,
) -> tuple[JobState, dict[str, Any] | None]:
    """Check the edge and update the job's bookkeeping for it; returns the old state and
    the stretch on GPUs the change ends (:func:`_release`), if any."""
    old = JobState(job.state)
    run = None
    check_transition(old, new)
    if new is JobState.RUNNING:
        if not allocation:
            raise PlacementError(f"starting job {job.id} needs a non-empty allocation")
        job.allocation = [dict(s) for s in allocation]
        job.last_start = t
        if job.started_at is None:
            job.started_at = t
        _new_attempt(job)
        job.pending_reason = None
        job.next_attempt_at = None
    elif new.value not in HOLDING:
        run = _release(job, t if ran_until is None else min(t, ran_until))
    if new is JobState.PREEMPTING:
        if not not_launched(job):  # a run never launched loses no work: no preemption
            job.preemptions += 1
    elif new is JobState.RESTARTING and counted:
        job.restarts += 1
        job.next_attempt_at = t + restart_backoff(job.restarts, RESTART_BACKOFF_SECONDS)
    elif new is JobState.PENDING:
        job.pending_reason = pending_reasons.requeued(job, old)
    if new.terminal:
        job.finished_at = t
        job.pending_reason = None
    if exit_code is not None or new.terminal or new is JobState.RUNNING:
        job.exit_code = exit_code  # a new run, or an end without a run's exit: no code
    job.state = new.value
    return old, run


def resize(
    session: Session,
    job: Job,
    allocation: list[ShareDict],
    batch_size: int | None = None,
    now: float | None = None,
    *,
    flush: bool = True,
    events: EventBatch,
) -> None:
    """Move a RUNNING job to a new allocation (a restart in place: ``attempt`` increments,
    the state stays RUNNING, so no event is written). ``flush=False``: the caller flushes (a
    round, with :func:`flush_or_conflict`). The stretch on the old allocation goes to
    ``events``, which the caller writes (:meth:`EventBatch.write`). The run it leaves is
    recorded in ``moved_from`` (an earlier one whose exit is not judged yet stays there),
    for the launch of the new run to judge how it ended."""
    t = resolve_now(now)
    job_id = job.id
    if job.state != JobState.RUNNING.value or not allocation:
        raise PlacementError(f"cannot resize job {job.id} in state {job.state}")
    waiting = not_launched(job)
    # the run it leaves, judged when the new one launches: a run never launched has no exit
    # to judge (its new run's clock then starts at its own launch, as a first run's does)
    moved = job.moved_from if job.moved_from is not None or waiting else job.attempt
    run = _release(job, _charged_until(job, t))
    if run is not None:
        events.add_run(run)
    if moved is not None:  # the run it leaves: judged when the new one is launched
        job.moved_from = moved
    job.allocation = [dict(s) for s in allocation]
    job.last_start = t
    _new_attempt(job)
    if batch_size is not None:
        job.batch_size = batch_size
    if flush:
        flush_or_conflict(session, job_id)


def rebatch(session: Session, job: Job, batch_size: int, *, flush: bool = True) -> None:
    """Record a batch-only change of a RUNNING job: ``batch_size`` becomes its global batch,
    its allocation and ``attempt`` stay (its process is not restarted: the job reads the new
    batch in the reply to its next metrics report; a later launch gets it as its
    ``JobLaunch.batch_size``, like any batch the scheduler chose). No event: the state does
    not change. ``flush=False``: the caller flushes (as with :func:`resize`)."""
    if job.state != JobState.RUNNING.value:
        raise PlacementError(f"cannot rebatch job {job.id} in state {job.state}")
    if batch_size <= 0:
        raise PlacementError(f"cannot rebatch job {job.id} to batch size {batch_size}")
    if job.batch_size != batch_size:
        job.batch_size = batch_size
        if flush:
            flush_or_conflict(session, job.id)


def cancel_job(
    session: Session,
    job_id: str,
    viewer: User | None = None,
    reason: str | None = None,
    now: float | None = None,
) -> Job:
    """Cancel a job. A queued job (PENDING, RESTARTING) becomes CANCELLED now; a job holding
    GPUs (RUNNING, PREEMPTING) gets ``cancel_requested_at`` and the reconcile loop stops it and
    records CANCELLED. Cancelling twice is harmless; a finished job is a ConflictError."""
    t = resolve_now(now)
    job = locked_job(session, job_id, viewer)
    who = viewer.name if viewer is not None else "the system"
    why = reason or f"cancelled by {who}"
    state = JobState(job.state)
    if state.terminal:
        raise ConflictError(f"job {job.id} already finished ({state}); nothing to cancel")
    if state.value in HOLDING:
        if job.cancel_requested_at is None:
            job.cancel_requested_at = t
            job.cancel_reason = why
            flush_or_conflict(session, job.id)
        return job
    change_state(session, job, JobState.CANCELLED, why, t)
    return job


def set_priority(session: Session, job_id: str, priority: int, viewer: User | None = None) -> Job:
    """Change the priority of an unfinished job (its owner's or, for an admin, anyone's):
    the next scheduling round ranks it anew (a running job may then preempt or be
    preempted); an event records the change. A finished job is a :class:`ConflictError`.
    :func:`~danlu.server.services.job_changes.change_job` with the priority alone."""
    from danlu.server.services import job_changes  # it builds on this module

    change = job_changes.JobChange(priority=priority)
    return job_changes.change_job(session, job_id, change, viewer).job


def hold(
    session: Session,
    job_id: str,
    held: bool,
    viewer: User | None = None,
    now: float | None = None,
) -> Job:
    """Hold an unfinished job: the scheduler passes it by until it is released
    (``held=False``); a running one is preempted by checkpoint in the next round first (it
    resumes from its checkpoint once released). Holding a held job, or releasing an
    unfinished one that is not held, changes nothing. A finished job can be neither held nor
    released (:class:`ConflictError` naming its state, as for its cancel or a new priority:
    it is scheduled no more, held or not; a rerun runs it again), a running one that is not
    preemptible cannot be held (cancel it instead), nor one being cancelled (its run is
    stopped and it ends CANCELLED: a hold read as if it were to wait); an unfinished held
    job can always be released, and a running one released before its preemption keeps
    running. A held job's ``pending_reason`` names who held it, also once a job held while
    it ran is re-queued; a released one's names what it waits for
    (:mod:`~danlu.server.services.pending_reasons`)."""
    job = locked_job(session, job_id, viewer)
    state = JobState(job.state)
    if state.terminal:  # before "unchanged": a job held before it ended too
        if held:
            raise ConflictError(f"job {job.id} is {job.state}: a finished job cannot be held")
        raise ConflictError(
            f"job {job.id} is {job.state}: release lets a held job be scheduled again, and a "
            "finished job is scheduled no more; rerun it to run it again"
        )
    if held and job.cancel_requested_at is not None:  # it ends CANCELLED, not held
        raise ConflictError(
            f"job {job.id} is being cancelled ({job.cancel_reason or 'cancelled'}): it ends "
            "CANCELLED once its run has stopped, so there is nothing to hold"
        )
    if held == (job.held_at is not None):
        return job
    if held:
        if state is JobState.RUNNING and not job_spec(job).preemptible:
            raise ConflictError(
                f"job {job.id} is running and not preemptible (its spec says so): it cannot "
                "be held without losing its work; cancel it instead"
            )
        job.held_at = resolve_now(now)
        who = viewer.name if viewer is not None else "the system"
        # also while it holds GPUs: the reason it gets once re-queued (_transition keeps it)
        job.pending_reason = pending_reasons.held_by(who)
    else:
        job.held_at = None
        if state is JobState.PENDING:
            job.pending_reason = pending_reasons.released(session, job)
        else:  # it holds GPUs yet: its re-queue writes its own reason
            job.pending_reason = None
    flush_or_conflict(session, job.id)
    return job


RESUME_REASON = "re-queued to resume from its last checkpoint"
"""The reason of a job's PREEMPTING -> PENDING edge when its run was lost, not stopped."""


def settle_exit(
    session: Session,
    job: Job,
    *,
    succeeded: bool,
    exit_code: int | None,
    reason: str,
    node_lost: bool = False,
    preempted: bool = False,
    failed: bool = False,
    now: float | None = None,
    ran_until: float | None = None,
    final: bool = False,
) -> list[JobEvent]:
    """Record the exit of a RUNNING / PREEMPTING job's process: CANCELLED if cancellation
    was requested, SUCCEEDED (also when it finished while being preempted), re-queued if it
    stopped for a preemption, was lost with its node or failed on a faulty GPU
    (``node_lost``), or stopped itself to resume later (``preempted``: it exited 75 after
    a SIGTERM from outside danlu): RUNNING -> PREEMPTING -> PENDING, resuming from its last
    checkpoint, a preemption counted, no restart; or after a failure RESTARTING -> PENDING
    with backoff while ``restarts < max_restarts``, else FAILED; ``failed``: the run failed
    (a crash, an OOM), which counts also while being preempted (PREEMPTING -> PENDING with a
    restart counted and backoff, or FAILED); ``final``: the run failed in a way any restart
    would repeat (it cannot fit its memory), FAILED at once, no restart spent (while being
    preempted too). The run's GPUs are charged up to ``ran_until`` (when it exited, if before
    ``now``, on the control plane's clock:
    :func:`~danlu.server.reconcile.ran_until`); a run that succeeded before the job's
    cancellation was requested ends it SUCCEEDED (the request came too late). The run's
    token (``DANLU_TOKEN``) is revoked: an ended run reports nothing more (a next run gets
    its own)."""
    t = resolve_now(now)
    state = JobState(job.state)
    if state.value not in HOLDING:
        raise ConflictError(f"job {job.id} is {state}; only a running job can exit")
    revoke_job_tokens(session, job.id, t)

    def ends(new: JobState, why: str) -> JobEvent:  # the change that ends the run
        return change_state(session, job, new, why, t, exit_code=exit_code, ran_until=ran_until)

    asked = job.cancel_requested_at
    if asked is not None and not (succeeded and ran_until is not None and ran_until < asked):
        why, late = job.cancel_reason or "cancelled", (ran_until or t) - asked
        if why.startswith(LIMIT_STOPS[1]) and late >= 1:  # its text: when the limit was seen
            why += f"; the run ended {format_duration(late)} later (its grace to checkpoint)"
        return [ends(JobState.CANCELLED, why)]
    stopping = state is JobState.PREEMPTING and not succeeded
    if stopping and (node_lost or not failed):
        return [ends(JobState.PENDING, reason)]
    if stopping:
        reason = f"{reason} during its preemption"
    elif (node_lost or preempted) and not succeeded:
        return [
            change_state(session, job, JobState.PREEMPTING, reason, t, exit_code=exit_code),
            change_state(session, job, JobState.PENDING, RESUME_REASON, t, ran_until=ran_until),
        ]
    if succeeded:
        return [ends(JobState.SUCCEEDED, reason)]
    if final:
        return [ends(JobState.FAILED, reason)]
    if job.restarts < job_spec(job).max_restarts and stopping:  # no edge to RESTARTING
        job.restarts += 1
        delay = restart_backoff(job.restarts, RESTART_BACKOFF_SECONDS)
        job.next_attempt_at = t + delay
        first = ends(JobState.PENDING, f"{reason}; restart counted, retry after {delay:g}s")
        job.pending_reason = pending_reasons.requeued(job, JobState.RESTARTING)
        return [first]
    if job.restarts < job_spec(job).max_restarts:
        first = ends(JobState.RESTARTING, reason)
        delay = (job.next_attempt_at or t) - t
        second = change_state(
            session, job, JobState.PENDING, f"re-queued; retry after {delay:g}s backoff", t
        )
        return [first, second]
    limit = job_spec(job).max_restarts
    return [ends(JobState.FAILED, f"{reason}; out of restarts ({job.restarts} of {limit})")]


def requeue_unlaunched(
    session: Session, job: Job, error: str, now: float | None = None, *, cause: str = NODE_FAULT
) -> None:
    """Re-queue a RUNNING job whose launch failed for reasons of the node's (its disk full,
    out of processes or memory; :func:`~danlu.executors.is_node_fault`): RUNNING ->
    RESTARTING -> PENDING without counting a restart against the job, which never ran,
    and eligible again after a backoff that doubles with each such failure of the job
    (10 s, at most :data:`NODE_RETRY_CAP_SECONDS`); a job whose cancellation was requested
    is CANCELLED. ``cause``: how the reason begins, before ``error``
    (:data:`CHECKPOINT_DIR_FAULT`: the control plane could not make the job's checkpoint
    directory, which is no node's failure); the backoff doubles with each failure of the
    same cause."""
    t = resolve_now(now)
    reason = f"{cause}: {error}"
    until = _charged_until(job, t)  # a run never launched: its wait charged nothing
    if job.state != JobState.RUNNING.value or job.cancel_requested_at is not None:
        settle_exit(
            session, job, succeeded=False, exit_code=None, reason=reason, now=t, ran_until=until
        )
        return
    revoke_job_tokens(session, job.id, t)  # the token of the run that never started
    earlier = session.scalar(
        select(func.count())
        .select_from(JobEvent)
        .where(JobEvent.job_id == job.id, JobEvent.reason.startswith(cause, autoescape=True))
    )
    why = f"{reason} (no restart counted)"
    change_state(session, job, JobState.RESTARTING, why, t, counted=False, ran_until=until)
    delay = restart_backoff(int(earlier or 0) + 1, RESTART_BACKOFF_SECONDS, NODE_RETRY_CAP_SECONDS)
    job.next_attempt_at = t + delay
    change_state(session, job, JobState.PENDING, f"re-queued; retry after {delay:g}s", t)
    if job.held_at is None:  # a held job keeps saying who held it
        job.pending_reason = reason


def requeue_lost(session: Session, job: Job, lost: list[str], now: float | None = None) -> None:
    """Re-queue a RUNNING or PREEMPTING job whose GPUs left the inventory (with the node its
    run was on) as a preemption without a checkpoint: RUNNING -> PREEMPTING -> PENDING, or
    PREEMPTING -> PENDING, so it resumes from its last checkpoint and no restart is counted
    against it; a job whose cancellation was requested is CANCELLED. A run waiting for its
    launch (:func:`waits_for_launch`) ran nothing: it is charged no GPU time."""
    requeue_lost_run(session, job, f"its GPUs left the inventory ({', '.join(lost)})", now)


def requeue_lost_run(session: Session, job: Job, reason: str, now: float | None = None) -> None:
    """Settle the exit of a RUNNING or PREEMPTING job's run that was lost, for ``reason``,
    with no one to see when it ended: a preemption without a checkpoint, no restart counted
    (:func:`requeue_lost`), its GPUs charged up to ``now`` (none for a run still waiting for
    its launch)."""
    t = resolve_now(now)
    settle_exit(
        session,
        job,
        succeeded=False,
        exit_code=None,
        reason=reason,
        node_lost=True,
        now=t,
        ran_until=_charged_until(job, t),
    )
