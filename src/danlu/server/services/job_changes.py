"""Changing a job's spec: an unfinished job's fields (``PATCH /jobs/{id}``:
:func:`change_job`) and a finished job's spec submitted again with changes (``POST
/jobs/{id}/rerun``: :func:`rerun_with`), each validated as a submission's spec is.

An unfinished job's ``priority``, ``time_limit`` and ``deadline`` (:data:`LIVE_FIELDS`)
change in any state and take effect with no restart: the next round ranks it anew, and
every pass checks the limits. A time limit or deadline is removed with the word ``none``
(or Slurm's ``UNLIMITED``, any case: :data:`REMOVALS`), which only a change (or a rerun's
changes) takes: a job spec refuses it, and a null field is one left out, in a rerun's
changes too (the finished job's limit is kept). Its ``resources`` and ``max_restarts``
(:data:`QUEUED_FIELDS`) change only while it is PENDING: a start reads them. Each change is
recorded in an event of the job whose state is the same before and after (``changed by
alice: time_limit 1h -> 2h``); webhooks, told of state changes, are not told of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from danlu.core.errors import SpecError
from danlu.core.spec import MAX_PRIORITY, GpuCount, JobSpec, Resources, parse_spec
from danlu.core.state import JobState
from danlu.core.units import format_bytes, format_duration
from danlu.server.db.models import Job, JobEvent, User
from danlu.server.errors import ConflictError
from danlu.server.services import admission, jobs, submission
from danlu.server.services.common import resolve_now

LIVE_FIELDS = ("priority", "time_limit", "deadline")
"""The fields of a job that change while it runs, taking effect without a restart."""
QUEUED_FIELDS = ("resources", "max_restarts")
"""The fields of a job that change only while it is PENDING (a start reads them)."""
SPEC_FIELDS = ("time_limit", "deadline", "max_restarts", "resources")
"""The fields of :class:`JobChange` that are its spec's (``priority`` is the job's own:
the spec keeps the priority it was submitted with)."""
REMOVABLE = ("time_limit", "deadline")
"""The fields of :class:`JobChange` that a word of :data:`REMOVALS` removes."""
REMOVALS = frozenset({"none", "unlimited"})
"""The words (any case, spaces around them ignored) that remove a job's time limit or
deadline in a change: ``none``, and Slurm's ``UNLIMITED`` (``scontrol update
TimeLimit=UNLIMITED``)."""
BYTE_SIZES = frozenset({"gpu_memory", "memory"})
"""The ``resources`` fields that are sizes in bytes (an event writes them ``40.0GiB``)."""


@dataclass(frozen=True)
class JobChange:
    """What a ``PATCH /jobs/{id}`` changes of a job; None leaves a field as it is. The spec's
    fields as a job spec writes them (``time_limit: 2h``, ``resources: {gpus: 2}``: merged
    into the job's resources, :func:`spec_with`), validated as at submission; a word of
    :data:`REMOVALS` for ``time_limit`` or ``deadline`` removes it."""

    priority: int | None = None
    time_limit: Any = None
    deadline: Any = None
    max_restarts: Any = None
    resources: Mapping[str, Any] | None = None

    def spec_changes(self) -> dict[str, Any]:
        """The spec's fields given, as :func:`spec_with` takes them: a time limit or
        deadline removed (:func:`removes`) is None."""
        given = {name: getattr(self, name) for name in SPEC_FIELDS}
        return {
            name: None if name in REMOVABLE and removes(value) else value
            for name, value in given.items()
            if value is not None
        }

    def given(self) -> list[str]:
        """The names of the fields given, priority first."""
        return ["priority"] * (self.priority is not None) + list(self.spec_changes())


def removes(value: Any) -> bool:
    """Whether ``value``, given for a time limit or deadline, removes it: a word of
    :data:`REMOVALS`."""
    return isinstance(value, str) and value.strip().lower() in REMOVALS


@dataclass(frozen=True)
class Resolved:
    """What the route estimated, outside any transaction, for a PENDING job's new
    ``resources`` (as for a submission's: ``gpu_memory: auto``, the micro-batch limit)."""

    resources: Resources
    """The resources estimated for: a job whose resources changed meanwhile is a conflict."""
    gpu_memory: int | None
    micro_batch_limit: int | None
    notes: list[str] = field(default_factory=list)
    """What the estimate tells (the words of a submission's ``notes``)."""


@dataclass(frozen=True)
class Changed:
    """The job :func:`change_job` changed, and what the change tells (``notes``)."""

    job: Job
    notes: list[str]


def spec_with(spec: JobSpec, changes: Mapping[str, Any]) -> JobSpec:
    """``spec`` with ``changes``, fields as a job spec writes them: a mapping given for a
    mapping (``resources``, ``env``, ``training``, ``resources.gpus``) merged into it key by
    key, anything else replacing the field. Validated as a submission's spec is
    (:func:`~danlu.core.spec.parse_spec`: a :class:`SpecError` names the field); the
    admission's checks are the caller's."""
    if not isinstance(changes, Mapping):
        raise SpecError("body", "write the fields to change as a mapping, e.g. {time_limit: 2h}")
    return parse_spec(_merged(spec.model_dump(mode="json"), changes))


def _merged(base: Any, changes: Any) -> Any:
    """``changes`` merged into ``base`` where both are mappings (a copy), else ``changes``."""
    if not (isinstance(base, Mapping) and isinstance(changes, Mapping)):
        return changes
    out = dict(base)
    for key, value in changes.items():
        out[key] = _merged(out.get(key), value)
    return out


def changed_paths(changes: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted fields ``changes`` sets (``resources.gpus``, ``env.SEED``), in order."""
    out: list[str] = []
    for key, value in changes.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out += changed_paths(value, f"{path}.")
        else:
            out.append(path)
    return out


def rerun_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """A rerun's ``changes`` (``POST /jobs/{id}/rerun``'s body) as :func:`spec_with` takes
    them, their time limit and deadline read as a :class:`JobChange` reads them: null is a
    field left out (the finished job's is kept), a word of :data:`REMOVALS` removes it
    (None). Other fields stay as given: a null there replaces the field, as a job spec's
    null leaves it unset."""
    out: dict[str, Any] = {}
    for name, value in changes.items():
        if name in REMOVABLE:
            if value is None:
                continue
            value = None if removes(value) else value
        out[name] = value
    return out


def rerun_with(spec: JobSpec, changes: Mapping[str, Any]) -> JobSpec:
    """``spec`` (a finished job's, :func:`~danlu.server.services.jobs.rerun_spec`) with a
    rerun's ``changes`` as :func:`rerun_changes` reads them (:func:`spec_with`); a refused
    time limit or deadline says how to remove it, as a change's does."""
    return _with_removal_hint(spec, rerun_changes(changes))


def _with_removal_hint(spec: JobSpec, changes: Mapping[str, Any]) -> JobSpec:
    """:func:`spec_with`, its :class:`SpecError` for a time limit or deadline saying how to
    remove one (the word ``none``, which a job spec refuses)."""
    try:
        return spec_with(spec, changes)
    except SpecError as exc:
        if exc.field not in REMOVABLE:
            raise
        what = "time limit" if exc.field == "time_limit" else "deadline"
        raise SpecError(
            exc.field, f"{exc.message}; to remove the {what}, write none (or UNLIMITED)"
        ) from None


def rerun_told(job_id: str, changes: Mapping[str, Any] | None) -> str:
    """What the first event of a rerun of job ``job_id`` says of it: ``rerun of ID``, and
    the fields ``changes`` set (``; changed resources.gpus, time_limit``; a time limit or
    deadline given as null is not one: :func:`rerun_changes`)."""
    paths = changed_paths(rerun_changes(changes or {}))
    return f"rerun of {job_id}" + (f"; changed {', '.join(paths)}" if paths else "")


def _and(names: Sequence[str]) -> str:
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]


def check_state(job: Job, change: JobChange) -> None:
    """A :class:`ConflictError` when ``job``'s state does not take ``change``: a finished
    job changes nothing; a job that is not PENDING only :data:`LIVE_FIELDS` (the error names
    the others given, and how to change them); a job being cancelled none of its spec's."""
    given = change.given()
    if not given:
        return
    state = JobState(job.state)
    if state.terminal:
        verb = "stays" if len(given) == 1 else "stay"
        raise ConflictError(f"job {job.id} already finished ({state}); its {_and(given)} {verb}")
    queued = [name for name in given if name in QUEUED_FIELDS]
    if queued and state is not JobState.PENDING:
        raise ConflictError(
            f"job {job.id} is {state}: {_and(queued)} change only while it is PENDING (a "
            f"start reads them); a {state} job's {_and(LIVE_FIELDS)} change. Hold it first "
            f"(danlu hold {job.id}: a running job checkpoints and waits), change them, then "
            "release it"
        )
    spec_fields = [name for name in given if name in SPEC_FIELDS]
    if spec_fields and job.cancel_requested_at is not None:
        stay = "stays as it is" if len(spec_fields) == 1 else "stay as they are"
        raise ConflictError(
            f"job {job.id} is being cancelled ({job.cancel_reason or 'cancelled'}): it ends "
            f"CANCELLED once its run has stopped; its {_and(spec_fields)} {stay}"
        )


def check_priority(priority: int | None) -> None:
    """A :class:`SpecError` naming ``priority`` unless it is None or a whole number within
    -:data:`~danlu.core.spec.MAX_PRIORITY`..:data:`~danlu.core.spec.MAX_PRIORITY`."""
    if priority is None:
        return
    if isinstance(priority, bool) or not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise SpecError("priority", f"must lie within -{MAX_PRIORITY}..{MAX_PRIORITY}")


def changed_spec(job: Job, change: JobChange) -> JobSpec | None:
    """The spec ``job`` gets with ``change`` (validated: :func:`spec_with`), or None when
    it changes no field of the spec; after :func:`check_state`."""
    check_state(job, change)
    changes = change.spec_changes()
    if not changes:
        return None
    spec = _with_removal_hint(jobs.job_spec(job), changes)
    admission.check_spec_shape(spec)
    return spec


def change_job(
    session: Session,
    job_id: str,
    change: JobChange,
    viewer: User | None = None,
    *,
    resolved: Resolved | None = None,
    now: float | None = None,
) -> Changed:
    """Change an unfinished job (its owner's or, for an admin, anyone's) as ``change`` says,
    in the caller's transaction, with an event naming each field changed, old and new (none
    when nothing changes). New ``resources`` pass the admission's checks against the
    inventory and the quotas, as a submission's (:func:`~danlu.server.services.submission.
    check_fit`), with the bytes per GPU and micro-batch limit ``resolved`` estimated (none:
    the spec's size, whole GPUs for ``auto``, as :func:`~danlu.server.services.jobs.submit`
    without an estimate). Raises :class:`ConflictError` (:func:`check_state`),
    :class:`SpecError` (a value the spec refuses, naming its field) or
    :class:`~danlu.server.errors.AdmissionError` (resources that can never fit)."""
    t = resolve_now(now)
    check_priority(change.priority)
    job = jobs.locked_job(session, job_id, viewer)
    spec = changed_spec(job, change)
    told: list[str] = []
    notes: list[str] = []
    if change.priority is not None and change.priority != job.priority:
        told.append(f"priority {job.priority} -> {change.priority}")
        job.priority = change.priority
    old = jobs.job_spec(job)
    if spec is not None and spec != old:
        told += spec_told(old, spec)
        if spec.resources != old.resources:
            notes += _new_resources(session, job, spec, resolved, t)
        job.spec = spec.model_dump(mode="json")
        job.time_limit = spec.time_limit
        job.deadline_at = None if spec.deadline is None else job.submitted_at + spec.deadline
        notes += _limits_passed(job, old, spec, t)
    if told:
        who = viewer.name if viewer is not None else "the system"
        reason = f"changed by {who}: {'; '.join(told)}"
        session.add(JobEvent(job_id=job.id, time=t, old=job.state, new=job.state, reason=reason))
        jobs.flush_or_conflict(session, job.id)
    return Changed(job, notes)


def _new_resources(
    session: Session, job: Job, spec: JobSpec, resolved: Resolved | None, t: float
) -> list[str]:
    """Check a PENDING job's new resources as a submission's and record what a start reads
    of them (bytes per GPU, micro-batch limit); what the estimate tells."""
    if resolved is not None and resolved.resources != spec.resources:
        raise ConflictError(f"job {job.id}'s resources changed concurrently; retry")
    memory = resolved.gpu_memory if resolved is not None else None
    memory = submission.check_fit(session, spec, job.project, job.user, gpu_memory=memory, now=t)
    job.gpu_memory_per_gpu = memory or None
    if resolved is not None:
        micro = resolved.micro_batch_limit
        job.micro_batch_limit = micro if micro and micro > 0 else None
        return list(resolved.notes)
    return []


def _limits_passed(job: Job, old: JobSpec, spec: JobSpec, t: float) -> list[str]:
    """Notes of a new time limit the job's runs have used up, or a new deadline passed:
    the next pass stops the job (it ends CANCELLED)."""
    notes = []
    ran = jobs.run_time_at(job, t)
    if spec.time_limit != old.time_limit and spec.time_limit is not None and ran >= spec.time_limit:
        notes.append(
            f"its runs have held GPUs for {format_duration(ran)}, its new time limit of "
            f"{format_duration(spec.time_limit)} or more: the next pass stops it (CANCELLED)"
        )
    passed = job.deadline_at is not None and job.deadline_at <= t
    if spec.deadline != old.deadline and spec.deadline is not None and passed:
        notes.append(
            f"its new deadline, {format_duration(spec.deadline)} after its submission, has "
            "passed: the next pass stops it (CANCELLED)"
        )
    return notes


def spec_told(old: JobSpec, new: JobSpec) -> list[str]:
    """Each field of the spec that changed from ``old`` to ``new`` (those a
    :class:`JobChange` changes), with both values: ``time_limit 1h -> 2h``,
    ``resources.gpus 1 -> 2``."""
    told = []
    for name in ("time_limit", "deadline"):
        before, after = getattr(old, name), getattr(new, name)
        if before != after:
            told.append(f"{name} {_duration(before)} -> {_duration(after)}")
    if old.max_restarts != new.max_restarts:
        told.append(f"max_restarts {old.max_restarts} -> {new.max_restarts}")
    for name in Resources.model_fields:
        before, after = getattr(old.resources, name), getattr(new.resources, name)
        if before != after:
            told.append(f"resources.{name} {_shown(name, before)} -> {_shown(name, after)}")
    return told


def _duration(seconds: float | None) -> str:
    return "none" if seconds is None else format_duration(seconds)


def _shown(name: str, value: Any) -> str:
    """A ``resources`` field's value as an event writes it."""
    if value is None:
        return "none"
    if isinstance(value, GpuCount):
        return str(value.min) if value.max == value.min else f"{value.min}..{value.max}"
    if name in BYTE_SIZES and isinstance(value, int):
        return format_bytes(value)
    if isinstance(value, list):
        return "[" + ", ".join(str(item) for item in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)
