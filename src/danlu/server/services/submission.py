"""Submission: the checks a job spec passes before it is queued, and the jobs it is queued as.

:func:`admit` runs the checks that depend on the spec's resources, project and owner: who
owns the job (the caller, or the user an admin names), the owner's limit of unfinished jobs,
the project and its members, and, against the inventory (read once), the GPU types named,
whether the spec can ever fit and the quotas. :func:`queue` adds a job of the admitted spec
(its row and its PENDING event, not flushed) and :func:`announce` flushes the jobs queued and
tells the webhooks. :func:`danlu.server.services.jobs.submit` runs the three for one job; a
sweep's trials, one spec but for each trial's name, environment and checkpoint directory
(none of which the checks read), are admitted once a batch
(:mod:`danlu.server.services.sweeps`): reading the inventory takes ~0.1 s at 1,000 nodes,
and a 1,000-task array that read it once a task outlived the client's timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from danlu.core.errors import SpecError
from danlu.core.spec import AUTO_FAMILY, Dependency, JobSpec
from danlu.core.state import JobState
from danlu.server.db.models import Job, JobEvent, Project, User
from danlu.server.errors import ConflictError, NotFoundError, PermissionDenied
from danlu.server.services import admission, members, webhooks
from danlu.server.services.cluster import load_cluster
from danlu.server.services.common import lock_row
from danlu.server.services.dependencies import Verdict
from danlu.server.services.projects import list_projects, project_for_use
from danlu.server.services.users import check_enabled, get_user


@dataclass(frozen=True)
class Admitted:
    """A job spec that passed the admission checks (:func:`admit`), with what they found."""

    spec: JobSpec
    """The spec as checked, ``training.family: auto`` replaced by the family inferred."""
    caller: User
    """Who submits it (named in each job's first event: ``submitted by``)."""
    owner: User
    project: Project
    family: str | None
    """The family inferred for ``training.family: auto`` (None: none was)."""
    gpu_memory: int | None
    """Bytes per GPU each job asks for (None or 0: whole GPUs)."""
    micro_batch_limit: int | None
    told: str = ""
    """What each job's first event says after ``submitted by NAME`` (``rerun of 3f2a...``),
    in parentheses; nothing when empty."""


def owner_of(session: Session, spec: JobSpec, caller: User) -> User:
    """The owner of a job of ``spec`` that ``caller`` submits: the caller, or the user an
    admin names in ``user`` (:class:`PermissionDenied` for a non-admin naming another,
    :class:`SpecError` on ``user`` naming no user, :class:`ConflictError` on ``user``
    naming a disabled one)."""
    if spec.user in ("default", caller.name):
        return caller
    if not caller.is_admin:
        raise PermissionDenied(
            f"{caller.name!r} may submit only as themselves, not as {spec.user!r}", field="user"
        )
    try:
        owner = get_user(session, spec.user)
    except NotFoundError:
        raise SpecError("user", f"unknown user {spec.user!r}") from None
    check_enabled(owner, "own a new job", "user")
    return owner


def check_unfinished(
    session: Session, owner: User, limit: int, adding: int = 1, *, adding_what: str = ""
) -> None:
    """ConflictError when ``adding`` more jobs would give ``owner`` more than ``limit``
    unfinished ones (``DANLU_MAX_JOBS_PER_USER``; a sweep adds its first ``parallel``
    trials, ``adding_what`` saying so in the error: ``this array's first 4 tasks``). The
    owner's row stays locked until the transaction ends, so that concurrent submissions for
    one owner count one after the other, each seeing the jobs the one before inserted."""
    lock_row(session, User, owner.id)
    unfinished = [s.value for s in JobState if not s.terminal]
    query = select(Job.seq).where(Job.user_id == owner.id, Job.state.in_(unfinished))
    count = session.scalar(select(func.count()).select_from(query.limit(limit).subquery())) or 0
    tail = "the most this control plane allows (DANLU_MAX_JOBS_PER_USER)"
    if count >= limit:
        raise ConflictError(
            f"user {owner.name} has {limit} unfinished jobs, {tail}; wait for some to finish, "
            "or cancel some"
        )
    if count + adding > limit:
        what = adding_what or f"{adding} more"
        raise ConflictError(
            f"user {owner.name} has {count} unfinished jobs and {what} would make "
            f"{count + adding}, past {limit}, {tail}; wait for some to "
            "finish, cancel some, or run fewer at once (parallel; --array's %N)"
        )


def project_named(session: Session, name: str, now: float) -> Project:
    """The project ``name`` a spec names (the default one made on first use);
    :class:`SpecError` on ``project`` naming the known ones for another."""
    try:
        found: Project = project_for_use(session, name, now)
    except NotFoundError:
        known = ", ".join(p.name for p in list_projects(session)) or "none"
        raise SpecError(
            "project", f"unknown project {name!r}; an admin creates it first (known: {known})"
        ) from None
    return found


def _with_family(spec: JobSpec, family: str | None) -> JobSpec:
    """``spec`` with ``training.family: auto`` replaced by ``family`` (kept without one)."""
    if spec.training.family != AUTO_FAMILY or family is None:
        return spec
    training = spec.training.model_copy(update={"family": family})
    return spec.model_copy(update={"training": training})


def admit(
    session: Session,
    spec: JobSpec,
    caller: User,
    *,
    gpu_memory: int | None = None,
    micro_batch_limit: int | None = None,
    family: str | None = None,
    max_unfinished: int = 0,
    now: float,
    told: str = "",
) -> Admitted:
    """Check ``spec`` (validated) for a job ``caller`` submits; the arguments as
    :func:`danlu.server.services.jobs.submit` takes them (``told``: what the jobs' first
    event says after who submitted them, :attr:`Admitted.told`). The ``depends_on`` of the
    spec is left to the caller (:func:`danlu.server.services.dependencies.resolve_for`)."""
    admission.check_spec_shape(spec)
    parsed = _with_family(spec, family)
    if gpu_memory is not None and gpu_memory < 0:
        raise SpecError("resources.gpu_memory", "a size cannot be negative")
    owner = owner_of(session, parsed, caller)
    if max_unfinished:
        check_unfinished(session, owner, max_unfinished)
    project = project_named(session, parsed.project, now)
    members.check_member(session, project, owner)
    memory = check_fit(session, parsed, project, owner, gpu_memory=gpu_memory, now=now)
    return Admitted(parsed, caller, owner, project, family, memory, micro_batch_limit, told)


def check_fit(
    session: Session,
    spec: JobSpec,
    project: Project,
    owner: User,
    *,
    gpu_memory: int | None,
    now: float,
) -> int | None:
    """The checks of ``spec``'s resources (validated) for a job of ``owner`` in ``project``,
    against the inventory (read here): the GPU types it names, whether it can ever fit, and
    the project's and the owner's quotas (:class:`AdmissionError` naming the field). Returns
    the bytes per GPU a job of it asks for: ``gpu_memory`` (the estimate of ``gpu_memory:
    auto``), else the spec's size, else None (whole GPUs). A submission's (:func:`admit`)
    and a queued job's new resources' (``PATCH /jobs/{id}``)."""
    memory = gpu_memory
    if memory is None and isinstance(spec.resources.gpu_memory, int):
        memory = spec.resources.gpu_memory
    cluster = load_cluster(session)
    request = admission.build_request(
        "",  # the checks below read the resources, not the id
        spec,
        submit_time=now,
        seq=0,
        priority=spec.priority + project.priority,
        gpu_memory=memory,
        gpu_types=admission.canonical_gpu_types(spec, cluster),
    )
    problem = admission.never_fits(request, cluster)
    if problem is not None:
        raise problem
    admission.check_quota(request, project, cluster, owner)
    return memory


def _event(job: Job, admitted: Admitted, now: float) -> dict[str, Any]:
    """The columns of a new job's first event."""
    told = f" ({admitted.told})" if admitted.told else ""
    return {
        "job_id": job.id,
        "time": now,
        "old": None,
        "new": JobState.PENDING.value,
        "reason": f"submitted by {admitted.caller.name}{told}",
    }


def queue(
    session: Session,
    admitted: Admitted,
    job_id: str,
    spec: JobSpec | None = None,
    *,
    depends_on: list[Dependency],
    waiting: Verdict,
    now: float,
) -> Job:
    """Add the PENDING job ``job_id`` of ``admitted``'s spec, or of ``spec``, a validated
    spec that differs from it in its ``name``, ``env`` or ``checkpoint_dir`` only (a
    sweep's trial), with its first event; ``depends_on`` with full ids and their
    ``waiting`` verdict. Not flushed: :func:`announce` the jobs queued."""
    parsed = admitted.spec if spec is None else _with_family(spec, admitted.family)
    stored = parsed.model_copy(update={"user": admitted.owner.name, "depends_on": depends_on})
    micro = admitted.micro_batch_limit
    job = Job(
        id=job_id,
        name=parsed.name,
        project_id=admitted.project.id,
        user_id=admitted.owner.id,
        priority=parsed.priority,
        spec=stored.model_dump(mode="json"),
        state=JobState.PENDING.value,
        gpu_memory_per_gpu=admitted.gpu_memory or None,
        micro_batch_limit=micro if micro and micro > 0 else None,
        batch_size=parsed.training.global_batch_size,
        submitted_at=now,
        deadline_at=None if parsed.deadline is None else now + parsed.deadline,
        time_limit=parsed.time_limit,
        waiting_on=waiting.waiting_on,
        pending_reason=waiting.reason or "waiting for the next scheduling round",
    )
    session.add(job)
    session.add(JobEvent(**_event(job, admitted, now)))
    return job


def add_notes(job: Job, notes: Sequence[str]) -> None:
    """Add what the submission tells of a new job (how its ``gpu_memory: auto`` was
    resolved, and the like) to its pending reason: after what it waits for first, which a
    round does not rewrite, else in the reason of a job waiting for a round. The reply of
    ``POST /jobs`` gives them as they are too, in its ``notes``: the joined text does not
    part back into them (a note may hold ``"; "``, or a parenthesis it does not close)."""
    if not notes:
        return
    told = "; ".join(notes)
    if job.waiting_on is not None:
        job.pending_reason = f"{job.pending_reason}; {told}"
    else:
        job.pending_reason = f"waiting for the next scheduling round ({told})"


def announce(session: Session, admitted: Admitted, queued: Sequence[Job], now: float) -> None:
    """Write the jobs :func:`queue` added and queue the webhooks' deliveries of their first
    event, in one query for them all."""
    session.flush()
    owners = {"project_id": admitted.project.id, "user_id": admitted.owner.id}
    webhooks.enqueue(session, [_event(job, admitted, now) | owners for job in queued])
