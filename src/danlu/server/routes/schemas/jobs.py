"""The models of jobs (docs/api.md "Job"), their changes, events, logs and metrics, and the
functions that turn a job's store rows into them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, StrictFloat, StrictStr, field_validator

from danlu.core.state import JobState
from danlu.server.db import Job, JobEvent, JobMetric
from danlu.server.routes.schemas.base import StateName, _In, _no_boolean
from danlu.server.services.events import FeedEvent
from danlu.server.services.job_reasons import not_launched
from danlu.server.services.projects import HOLDING


class Share(BaseModel):
    """One GPU share of a job's allocation."""

    node: str
    gpu: int
    milli: int
    memory: int


class JobOut(BaseModel):
    """A job (docs/api.md "Job")."""

    id: str
    name: str
    project: str
    user: str
    priority: int
    state: StateName
    restarts: int
    preemptions: int
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    deadline_at: float | None = None
    """When the job must have finished (submission plus the spec's ``deadline``): an
    unfinished job is cancelled then. Null without a deadline."""
    time_limit: float | None = None
    """The spec's ``time_limit`` in seconds: how long the job may hold GPUs over all its runs
    before it is stopped and CANCELLED. Null without one."""
    run_time: float = 0.0
    """Seconds the job held GPUs in its runs ended so far (the current run's time is not in
    it until the run ends)."""
    energy_joules: float | None = None
    """Joules the job's GPUs used over its runs (its share of each GPU's energy, as the
    control plane's meter charged it every few seconds); null where nothing meters its
    GPUs (a Slurm or Ray cluster's, or ``DANLU_ENERGY_INTERVAL=0``) or before the first
    charge."""
    held_at: float | None = None
    """When the job was held (not scheduled until released); null when not held."""
    waiting_on: str | None = None
    """The id of a job in the spec's ``depends_on`` whose condition this PENDING job still
    waits for (it is not scheduled until that condition holds); null when it waits for none."""
    purged_at: float | None = None
    """When the retention deleted the finished job's metrics, logs and checkpoints."""
    exit_code: int | None
    pending_reason: str | None
    launched: bool = True
    """Whether the executor has launched the job's current run: false only while the job
    holds its GPUs (RUNNING or PREEMPTING) and its run is not launched yet: placed, which its
    next pass launches (usually within a second; longer while its cluster cannot be reached,
    said in ``pending_reason``, or while another run still holds one of its GPUs), or
    preempted before its launch, which then never comes; true otherwise."""
    end_reason: str | None = None
    """Why a job that ended (SUCCEEDED, FAILED, CANCELLED) ended: the reason of the event
    that ended it (``cancelled by alice``); null for a job that has not ended."""
    allocation: list[Share]
    gpus: int
    gpu_memory: int | None
    batch_size: int | None
    micro_batch_limit: int | None = None
    """The largest per-GPU micro-batch the memory model predicts to fit (estimated at
    submission for elastic jobs with ``training.model``); null when unknown."""
    checkpoint_step: int | None
    observed: dict[str, float]
    """The scheduler's measurement of the current run from the job's metric reports (per
    micro-step ``step_time``, ``sync_time``, ``local_bsz``, ...); empty when none."""
    spec: dict[str, Any]


class SubmittedOut(JobOut):
    """The reply of a submission (``POST /jobs``, ``POST /jobs/{id}/rerun``): the new Job
    with what its submission tells."""

    notes: list[str] = []
    """What the submission tells of the job, one note an entry, in the words a sweep's
    ``notes`` use (how ``gpu_memory: auto`` was resolved, or why it could not be: whole
    GPUs; the model family inferred); also in its ``pending_reason``, as before. Empty when
    nothing."""


class ChangedOut(JobOut):
    """The reply of ``PATCH /jobs/{id}``: the Job with what its change tells."""

    notes: list[str] = []
    """What the change tells, one note an entry: how a new ``gpu_memory: auto`` was
    resolved (a submission's words), a new time limit or deadline already passed (the next
    pass stops the job). Empty when nothing."""


class EventOut(BaseModel):
    """One state change of a job (or, its state the same before and after, a change of its
    fields: ``changed by alice: time_limit 1h -> 2h``)."""

    id: int
    job_id: str
    time: float
    old: StateName | None
    new: StateName
    reason: str


class LogRunOut(BaseModel):
    """Where one run of a job begins in the job's log (``GET /jobs/{id}/logs/runs``)."""

    attempt: int
    offset: int
    """The byte of the log where the run's output begins."""
    started_at: float
    """When the executor launched the run (POSIX seconds)."""


class FeedEventOut(EventOut):
    """One state change of the cluster-wide feed, with its job's name, user and project."""

    job_name: str
    user: str
    project: str


class WhyOut(BaseModel):
    """Why a job is where it is."""

    id: str
    state: StateName
    reason: str


class StoppingOut(BaseModel):
    """Why the control plane is stopping a job's run (``reason``), or null when it is
    stopping none."""

    id: str
    reason: str | None


def _no_boolean_duration(value: Any) -> Any:
    """A before-validator of a duration in a request body (seconds, or text such as
    ``2h``, which the spec's validation reads): ``true`` or ``false`` is refused."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {str(value).lower()}: write 7200 or 2h")
    return value


class JobPatch(_In):
    """What may change of an unfinished job (fields left out stay as they are). ``priority``,
    ``time_limit`` and ``deadline`` change in any unfinished state; ``resources`` and
    ``max_restarts`` only while the job is PENDING (a 409 names them otherwise). The spec's
    fields are validated as at submission (a 422 names the field). Null is a field left out;
    ``"none"`` (or Slurm's ``"UNLIMITED"``, any case) removes a time limit or deadline."""

    priority: int | None = Field(default=None, ge=-1_000_000, le=1_000_000)
    """A whole number; written as ``2.0`` it is 2, as a project's priority (``2.5``,
    ``true`` and ``"2"`` are refused; a job spec, read as YAML too, also takes ``"2"``)."""
    held: bool | None = Field(default=None, strict=True)
    """True holds a job (not scheduled until released; a running one is preempted by
    checkpoint first), False releases it."""
    time_limit: StrictFloat | StrictStr | None = None
    """The spec's ``time_limit``: seconds, or a duration such as ``2h`` or ``04:00:00``;
    ``"none"`` (or ``"UNLIMITED"``) removes it."""
    deadline: StrictFloat | StrictStr | None = None
    """The spec's ``deadline``: how long after its submission the job must have finished
    (seconds, or a duration such as ``6h``); ``"none"`` (or ``"UNLIMITED"``) removes it."""
    max_restarts: int | None = None
    """The spec's ``max_restarts`` (PENDING only)."""
    resources: dict[str, Any] | None = None
    """Fields of the spec's ``resources`` (``gpus``, ``gpu_memory``, ...), merged into the
    job's (PENDING only)."""

    _numbers = field_validator("priority", "max_restarts", mode="before")(_no_boolean)
    _durations = field_validator("time_limit", "deadline", mode="before")(_no_boolean_duration)


class MetricsIn(_In):
    """A batch of training metric records, each with an integer ``step``."""

    metrics: list[dict[str, Any]] = Field(max_length=1000)


class AcceptedOut(BaseModel):
    """How many metric records were stored, and the job's current global batch size as the
    scheduler set it (a batch-only change, ``Rebatch``, reaches the running job here)."""

    accepted: int
    batch_size: int | None = None


def job_out(job: Job, end_reason: str | None = None) -> dict[str, Any]:
    """``job`` as the API's Job object; ``end_reason``: why it ended, if it did
    (:func:`~danlu.server.services.jobs.end_reasons`)."""
    allocation = [
        {
            "node": str(s["node"]),
            "gpu": int(s["gpu"]),
            "milli": int(s["milli"]),
            "memory": int(s["memory"]),
        }
        for s in job.allocation or ()
    ]
    resources = (job.spec or {}).get("resources") or {}
    gpus = resources.get("gpus") or {}
    requested = int(gpus.get("min", 1)) if isinstance(gpus, dict) else 1
    return {
        "id": job.id,
        "name": job.name,
        "project": job.project.name,
        "user": job.user.name,
        "priority": job.priority,
        "state": job.state,
        "restarts": job.restarts,
        "preemptions": job.preemptions,
        "submitted_at": job.submitted_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "deadline_at": job.deadline_at,
        "time_limit": job.time_limit,
        "run_time": job.run_time,
        "energy_joules": job.energy,
        "purged_at": job.purged_at,
        "held_at": job.held_at,
        "waiting_on": job.waiting_on,
        "exit_code": job.exit_code,
        "pending_reason": job.pending_reason,
        "launched": not (job.state in HOLDING and not_launched(job)),
        "end_reason": end_reason,
        "allocation": allocation,
        "gpus": len(allocation) if allocation else requested,
        "gpu_memory": job.gpu_memory_per_gpu,
        "micro_batch_limit": job.micro_batch_limit,
        "batch_size": job.batch_size,
        "checkpoint_step": job.checkpoint_step,
        "observed": dict(job.observed or {}),
        "spec": job.spec,
    }


def event_out(event: JobEvent) -> dict[str, Any]:
    """``event`` as the API's Event object."""
    return {
        "id": event.id,
        "job_id": event.job_id,
        "time": event.time,
        "old": event.old,
        "new": event.new,
        "reason": event.reason,
    }


def feed_event_out(row: FeedEvent) -> dict[str, Any]:
    """An event of the feed as the API's FeedEvent object."""
    return event_out(row.event) | {
        "job_name": row.job_name,
        "user": row.user,
        "project": row.project,
    }


def metric_out(metric: JobMetric, superseded: bool | None = None) -> dict[str, Any]:
    """A metric record: its step, time and values; with ``superseded`` (whether a later
    attempt of the job, or a later rollback generation of its attempt, went back over it)
    also that and the ``attempt`` whose run reported it (null: stored before attempts were
    kept), and its ``rollback`` generation within that attempt when above 0, which replace
    values of those names."""
    out = {**metric.data, "step": metric.step, "time": metric.time}
    if superseded is not None:
        out.update(attempt=metric.attempt, superseded=superseded)
        if metric.rollback:  # absent before any rollback: as the records of every run before
            out["rollback"] = metric.rollback
    return out


TERMINAL = frozenset(s.value for s in JobState if s.terminal)
"""Names of the terminal states."""
