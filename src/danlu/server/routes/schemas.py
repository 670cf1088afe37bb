"""The JSON objects of docs/api.md (pydantic models, for the OpenAPI schema) and the functions
that turn store rows into them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictStr, field_validator

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.metric_record import MAX_TIME
from danlu.core.state import JobState
from danlu.core.values import control_character
from danlu.server.db import ApiToken, Job, JobEvent, JobMetric, Node, Project, User
from danlu.server.services.cluster import ABSENT, ShareRecord
from danlu.server.services.events import FeedEvent
from danlu.server.services.nodes import state as node_state
from danlu.server.services.projects import MAX_SHARE, MIN_SHARE, share_problem
from danlu.server.services.usage import Standing

MAX_GPU_INDEX = 1023
"""The highest GPU index a request may name (a node has far fewer)."""

StateName = Literal[
    "PENDING", "RUNNING", "PREEMPTING", "RESTARTING", "SUCCEEDED", "FAILED", "CANCELLED"
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _no_boolean(value: Any) -> Any:
    """A before-validator of a number in a request body: ``true`` or ``false`` is refused
    (pydantic read ``true`` as 1: ``{"quota_gpu_memory": true}`` set a quota of one byte,
    ``{"at": true}`` a cordon at the epoch, done now), and so is a string (pydantic read
    ``{"priority": "3"}`` as 3: a number sent as text, which a client in another language
    then reads back as a number and compares wrong)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}: write a number")
    if isinstance(value, str):
        raise ValueError(
            f"expected a number, got the string {value[:40]!r}: write the number without quotes"
        )
    return value


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


class GpuOut(BaseModel):
    """One GPU of a node with what is allocated on it. ``state``: ``ready``, ``cordoned``
    (this GPU alone closed to new work, by an admin or the health check; its jobs run on) or
    ``draining`` (closed, and its preemptible jobs preempted by checkpoint)."""

    index: int
    type: str
    memory: int
    allocated_memory: int
    allocated_milli: int
    jobs: list[str]
    """The ids of the jobs holding a share of it: for a non-admin, their own jobs' only
    (``GET /jobs`` shows them no other user's job); ``other_jobs`` counts the rest."""
    other_jobs: int = 0
    """The jobs of other users holding a share of it, whose ids ``jobs`` leaves out for a
    non-admin (0 for an admin, who sees every id)."""
    state: str = "ready"
    cordoned_at: float | None = None
    cordon_reason: str = ""
    uuid: str | None = None
    """NVML's UUID (``GPU-...``, as ``nvidia-smi -L`` and DCGM's ``UUID`` label show it);
    null for GPUs danlu knows only by count (fake GPUs, a cluster's)."""


class NodeOut(BaseModel):
    """A node of the inventory. ``state``: ``ready``, ``cordoned`` (closed to new work; its
    jobs run on) or ``draining`` (closed, and its preemptible jobs preempted by checkpoint)."""

    name: str
    gpu_type: str
    rack: str
    fake: bool
    gpus: list[GpuOut]
    state: str = "ready"
    cordoned_at: float | None = None
    cordon_reason: str = ""
    launch_failures: int = 0
    """Launches in a row that failed there for the node's reasons."""
    close_at: float | None = None
    """When a scheduled cordon or drain takes effect (null: none scheduled)."""
    close_action: str | None = None
    """``cordon`` or ``drain``: what is scheduled (null: nothing)."""
    close_reason: str = ""
    close_until: float | None = None
    """When the scheduled cordon or drain ends (null: none scheduled, or it has no end)."""
    open_at: float | None = None
    """When the node's cordon or drain ends: it is uncordoned then (null: it lasts until
    uncordoned)."""


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
    fields are validated as at submission (a 422 names the field)."""

    priority: int | None = Field(default=None, ge=-1_000_000, le=1_000_000)
    """A whole number; written as ``2.0`` it is 2, as a project's priority (``2.5``,
    ``true`` and ``"2"`` are refused; a job spec, read as YAML too, also takes ``"2"``)."""
    held: bool | None = Field(default=None, strict=True)
    """True holds a job (not scheduled until released; a running one is preempted by
    checkpoint first), False releases it."""
    time_limit: StrictFloat | StrictStr | None = None
    """The spec's ``time_limit``: seconds, or a duration such as ``2h`` or ``04:00:00``."""
    deadline: StrictFloat | StrictStr | None = None
    """The spec's ``deadline``: how long after its submission the job must have finished
    (seconds, or a duration such as ``6h``)."""
    max_restarts: int | None = None
    """The spec's ``max_restarts`` (PENDING only)."""
    resources: dict[str, Any] | None = None
    """Fields of the spec's ``resources`` (``gpus``, ``gpu_memory``, ...), merged into the
    job's (PENDING only)."""

    _numbers = field_validator("priority", "max_restarts", mode="before")(_no_boolean)
    _durations = field_validator("time_limit", "deadline", mode="before")(_no_boolean_duration)


class UsageOut(BaseModel):
    """What one user's jobs of one project used on GPUs in the period asked for."""

    project: str
    user: str
    gpu_hours: float
    gpu_memory_gib_hours: float
    jobs: int
    energy_kwh: float | None = None
    """kWh the jobs' GPUs used in the period (a stretch's metered energy counted for its
    part inside the period); null when none of them was metered."""


class CordonIn(_In):
    """Why a node is cordoned or drained (shown by ``danlu nodes``), and when: ``at`` (POSIX
    seconds) in the future schedules it for then; left out or past, it is done now.
    ``until`` (POSIX seconds, later than now and than ``at``): it ends then, the node
    uncordoned (left out: it lasts until uncordoned). ``gpu``: only the node's GPU at that
    index (now; not with a future ``at``, nor ``until``)."""

    reason: str = Field(default="", max_length=500)
    at: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    until: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    gpu: int | None = Field(default=None, ge=0, le=MAX_GPU_INDEX)

    _numbers = field_validator("at", "until", "gpu", mode="before")(_no_boolean)

    @field_validator("at", "until")
    @classmethod
    def _seconds(cls, value: float | None) -> float | None:
        if value is not None and value >= MAX_TIME:
            raise ValueError(
                f"must be POSIX seconds before the year 9999 (below {MAX_TIME:.0f}), got "
                f"{value:g}: a time in milliseconds is 1000 times too large"
            )
        return value


class UncordonIn(_In):
    """``gpu``: open only the node's GPU at that index (left out: the node)."""

    gpu: int | None = Field(default=None, ge=0, le=MAX_GPU_INDEX)

    _numbers = field_validator("gpu", mode="before")(_no_boolean)


class AllocationOut(BaseModel):
    """One GPU share held by a running job."""

    job_id: str
    node: str
    gpu: int
    milli: int
    memory: int


class ProjectOut(BaseModel):
    """A project (queue)."""

    name: str
    priority: int
    quota_gpus: float | None
    quota_gpu_memory: int | None
    share: float
    """Its weight in the fair-share policy (1 by default)."""
    members: list[str] = Field(default_factory=list)
    """The users who may submit jobs to it, by name; empty: every user may."""
    gpus_held: float | None = None
    """``GET /projects``: the GPUs its running jobs hold now."""
    recent_gpus: float | None = None
    """``GET /projects``: its recent usage in GPUs (the decayed average the fair-share
    policy's ``half_life`` weighs); null when the policy keeps no history."""
    notes: list[str] = []
    """``POST``/``PUT /projects``: what the request should know (a ``share`` other than 1
    given under a policy that does not read it)."""


UserName = Annotated[str, Field(min_length=1, max_length=64)]
"""A user's name in a request (the store's column holds 64 characters)."""


_SHARE_RANGE: dict[str, Any] = {"minimum": MIN_SHARE, "maximum": MAX_SHARE}
"""A project's ``share`` range, as the OpenAPI schema shows it (:func:`_share_in_range`
checks it)."""


def _share_in_range(value: float | None) -> float | None:
    """A new ``share`` from :data:`MIN_SHARE` to :data:`MAX_SHARE`, refused with the range
    (pydantic's bound errors named one end only); a stored project's smaller one stays."""
    problem = None if value is None else share_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


class ProjectIn(_In):
    """A new project (admin)."""

    name: str = Field(max_length=63)
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    quota_gpus: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)
    quota_gpu_memory: int | None = Field(default=None, ge=0, le=2**62)
    share: float = Field(default=1.0, allow_inf_nan=False, json_schema_extra=_SHARE_RANGE)
    members: list[UserName] = Field(default_factory=list, max_length=10_000)
    """The users who may submit jobs to it (besides the admins); empty: every user."""

    _numbers = field_validator(
        "priority", "quota_gpus", "quota_gpu_memory", "share", mode="before"
    )(_no_boolean)
    _share = field_validator("share")(_share_in_range)


class ProjectPatch(_In):
    """A partial project: fields present are changed (``null`` removes a quota; ``members``
    replaces the list, ``[]`` opens the project to every user)."""

    priority: int | None = Field(default=None, ge=-1_000_000, le=1_000_000)
    quota_gpus: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)
    quota_gpu_memory: int | None = Field(default=None, ge=0, le=2**62)
    share: float | None = Field(default=None, allow_inf_nan=False, json_schema_extra=_SHARE_RANGE)
    members: list[UserName] | None = Field(default=None, max_length=10_000)

    _numbers = field_validator(
        "priority", "quota_gpus", "quota_gpu_memory", "share", mode="before"
    )(_no_boolean)
    _share = field_validator("share")(_share_in_range)


class UserOut(BaseModel):
    """A user; ``os_user``: the OS account its jobs run as with ``DANLU_RUN_AS=user`` (null:
    the one named like the user)."""

    name: str
    role: Literal["admin", "user"]
    os_user: str | None = None
    quota_gpus: float | None = None
    """The most GPUs the user's running jobs may hold at once, in all projects; null: no
    limit of the user's own."""
    disabled_at: float | None = None
    """When an admin disabled the user (their tokens refused, their queued jobs not
    started); null: enabled."""


class UserIn(_In):
    """A new user (admin)."""

    name: str = Field(max_length=63)
    role: Literal["admin", "user"] = "user"
    os_user: str | None = Field(default=None, max_length=32)


class UserPatch(_In):
    """A change of a user (admin): ``os_user`` (null: the OS account named like the user),
    ``quota_gpus`` (null: none); fields left out stay as they are."""

    os_user: str | None = Field(default=None, max_length=32)
    quota_gpus: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)

    _numbers = field_validator("quota_gpus", mode="before")(_no_boolean)


class DisableIn(_In):
    """A user's disable (admin): ``cancel_jobs`` true cancels their unfinished jobs too,
    running ones stopped with their grace to checkpoint (default false: running jobs run
    on, queued ones are not started)."""

    cancel_jobs: bool = Field(default=False, strict=True)
    """``true`` or ``false`` only (``1`` or ``"yes"`` is a 422 naming it)."""


class UserJobsOut(BaseModel):
    """A user disabled or enabled, and what their unfinished jobs do now: ``queued`` hold no
    GPUs (not started while the user is disabled), ``running`` hold GPUs and run on,
    ``cancelled`` queued ones the disable cancelled, ``stopping`` running ones being
    stopped (``cancel_jobs``)."""

    user: UserOut
    queued: int
    running: int
    cancelled: int
    stopping: int


class TokenIn(_In):
    """A new API token's label: no control characters (an admin's ``danlu user tokens``
    prints it, where an ESC sequence or a line break would act on the terminal)."""

    name: str = Field(default="", max_length=64)

    @field_validator("name")
    @classmethod
    def _printable(cls, value: str) -> str:
        char = control_character(value)
        if char is not None:
            raise ValueError(
                "a token's label must not contain control characters (line breaks, tabs, ESC "
                f"sequences, bidirectional overrides), got {char!r} in {value!r}: give a "
                "label without them, e.g. 'laptop'"
            )
        return value


class TokenOut(BaseModel):
    """A new API token (shown once)."""

    token: str


class TokenInfoOut(BaseModel):
    """A live API token, without its secret: ``prefix`` is the ``dl_PREFIX_`` part that
    names it (to revoke it); ``job_id`` is set for the token of a job's run."""

    prefix: str
    name: str
    created_at: float
    last_used_at: float | None
    job_id: str | None


class RevokedOut(BaseModel):
    """How many tokens were revoked."""

    revoked: int


class MetricsIn(_In):
    """A batch of training metric records, each with an integer ``step``."""

    metrics: list[dict[str, Any]] = Field(max_length=1000)


class AcceptedOut(BaseModel):
    """How many metric records were stored, and the job's current global batch size as the
    scheduler set it (a batch-only change, ``Rebatch``, reaches the running job here)."""

    accepted: int
    batch_size: int | None = None


class HealthOut(BaseModel):
    """Liveness."""

    status: Literal["ok"]
    version: str


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


def project_out(
    project: Project, standing: Standing | None = None, members: list[str] | None = None
) -> dict[str, Any]:
    """``project`` as the API's Project object, with its ``members``; with ``standing``,
    what it holds and used lately."""
    out: dict[str, Any] = {
        "name": project.name,
        "priority": project.priority,
        "quota_gpus": project.quota_gpus,
        "quota_gpu_memory": project.quota_gpu_memory,
        "share": project.share,
        "members": members or [],
    }
    if standing is not None:
        out["gpus_held"] = standing.gpus_held
        out["recent_gpus"] = standing.recent_gpus
    return out


def token_out(token: ApiToken) -> dict[str, Any]:
    """``token`` as the API's TokenInfo object (no secret)."""
    return {
        "prefix": token.prefix,
        "name": token.name,
        "created_at": token.created_at,
        "last_used_at": token.last_used_at,
        "job_id": token.job_id,
    }


def user_out(user: User) -> dict[str, Any]:
    """``user`` as the API's User object."""
    return {
        "name": user.name,
        "role": user.role,
        "os_user": user.os_user,
        "quota_gpus": user.quota_gpus,
        "disabled_at": user.disabled_at,
    }


def nodes_out(
    nodes: list[Node], shares: list[ShareRecord], viewer: User | None = None
) -> list[dict[str, Any]]:
    """The inventory with, per GPU, the memory and compute allocated and the jobs holding it.
    A GPU the last reading lacked, kept for an admin's cordon (memory
    :data:`~danlu.server.services.cluster.ABSENT`), is left out, as ``GET /cluster/nodes``
    leaves it out: a cordon's reply listed it with ``memory: -1``. A non-admin ``viewer``
    sees the ids of their own jobs only, the others' counted in ``other_jobs`` (as
    ``GET /jobs`` lists them no other user's job); None or an admin: every id."""
    by_gpu: dict[tuple[str, int], list[ShareRecord]] = {}
    for share in shares:
        by_gpu.setdefault((share.node, share.gpu), []).append(share)
    out = []
    for node in nodes:
        gpus = []
        for gpu in node.gpus:
            if gpu.memory == ABSENT:
                continue
            held = by_gpu.get((node.name, gpu.index), [])
            holders = {s.job_id for s in held}
            shown = {s.job_id for s in held if sees_holder(viewer, s)}
            gpus.append(
                {
                    "index": gpu.index,
                    "type": gpu.gpu_type,
                    "memory": gpu.memory,
                    "allocated_memory": sum(s.memory for s in held),
                    "allocated_milli": min(MILLI_PER_GPU, sum(s.milli for s in held)),
                    "jobs": sorted(shown),
                    "other_jobs": len(holders - shown),
                    "state": node_state(gpu),
                    "cordoned_at": gpu.cordoned_at,
                    "cordon_reason": gpu.cordon_reason,
                    "uuid": gpu.uuid,
                }
            )
        out.append(
            {
                "name": node.name,
                "gpu_type": node.gpu_type,
                "rack": node.rack,
                "fake": node.fake,
                "gpus": gpus,
                "state": node_state(node),
                "cordoned_at": node.cordoned_at,
                "cordon_reason": node.cordon_reason,
                "launch_failures": node.launch_failures,
                "close_at": node.close_at,
                "close_action": None
                if node.close_at is None
                else ("drain" if node.close_drain else "cordon"),
                "close_reason": node.close_reason,
                "close_until": node.close_until,
                "open_at": node.open_at,
            }
        )
    return out


def sees_holder(viewer: User | None, share: ShareRecord) -> bool:
    """Whether ``viewer`` (None: the control plane itself) may see the id of the job holding
    ``share``: an admin, or the job's owner."""
    return viewer is None or viewer.is_admin or share.user_id == viewer.id


TERMINAL = frozenset(s.value for s in JobState if s.terminal)
"""Names of the terminal states."""


class TrialOut(BaseModel):
    """One trial of a sweep."""

    job_id: str
    trial: int
    state: StateName
    parameters: dict[str, Any]
    best: float | None
    """The best value of the sweep's metric the trial reported (null before any)."""
    step: int | None
    """The step of its last report of the metric."""
    stopped_early: bool = False
    """Cancelled by the sweep's early-stopping rule: it ended as the sweep meant it to (a
    DONE sweep whose other trials succeeded succeeded, for ``danlu wait`` and ``--after``)."""


class SweepOut(BaseModel):
    """A hyper-parameter sweep: ``state`` RUNNING, DONE, CANCELLED or FAILED (``reason``)."""

    id: str
    name: str
    user: str
    state: str
    reason: str
    metric: str | None
    """The metric its trials optimise; null for a sweep without one (a job array)."""
    goal: str | None
    array: bool = False
    """A job array (``danlu submit --array``): its trials are the tasks."""
    total: int
    """How many trials it runs in all."""
    submitted: int
    created_at: float
    finished_at: float | None
    spec: dict[str, Any]
    notes: list[str] = []
    """What the submission tells of every trial, as their pending reasons do (how
    ``gpu_memory: auto`` was resolved, or why it could not be: whole GPUs)."""
    trials: list[TrialOut] | None = None
    best: TrialOut | None = None


class WebhookIn(_In):
    """A new webhook (admin): the endpoint, the job states it hears of (default SUCCEEDED,
    FAILED, CANCELLED), and optionally the one project or user whose jobs count."""

    url: str = Field(max_length=2048)
    states: list[StateName] | None = Field(default=None, max_length=7)
    project: str | None = Field(default=None, max_length=63)
    user: str | None = Field(default=None, max_length=64)

    @field_validator("states", mode="before")
    @classmethod
    def _states_in_any_case(cls, value: Any) -> Any:
        """The state names in any case, as ``GET /jobs?state=`` reads them (``Failed`` is
        ``FAILED``); what is not a name is left for the check, which lists the valid ones."""
        if isinstance(value, list):
            return [name.upper() if isinstance(name, str) else name for name in value]
        return value


class WebhookOut(BaseModel):
    """A webhook, with its deliveries kept by outcome. ``secret`` is only in the reply that
    created it: the key of the ``X-Danlu-Signature`` HMAC of every message."""

    id: str
    url: str
    states: list[StateName]
    project: str | None
    user: str | None
    created_at: float
    created_by: str
    pending: int
    delivered: int
    failed: int
    last_error: str | None
    secret: str | None = None


class DeliveryOut(BaseModel):
    """One message to a webhook: ``done_at`` is set once delivered (``delivered``) or given
    up; ``status_code`` and ``last_error`` tell of the last attempt."""

    id: int
    kind: str
    job_id: str | None
    event: dict[str, Any]
    created_at: float
    attempts: int
    next_attempt_at: float
    done_at: float | None
    delivered: bool
    status_code: int | None
    last_error: str | None
