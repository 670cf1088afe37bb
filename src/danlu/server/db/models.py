"""SQLAlchemy 2 typed models of the control plane's store.

Times are POSIX seconds (``float``), the clock the scheduler's :class:`ClusterView` uses, so
nothing depends on a database's time-zone handling. Byte counts are 64-bit integers. JSON
columns hold plain data (the validated spec, allocations, payloads): never pickles.

The schema is created only by Alembic (``danlu.server.migrations``); the models and the first
revision are checked against each other by the test suite.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    func,
    literal_column,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# An auto-incrementing 64-bit key: SQLite only auto-increments INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer, "sqlite")


class Base(DeclarativeBase):
    """Declarative base with a naming convention (stable constraint names for Alembic)."""

    metadata = MetaData(naming_convention=NAMING)


class LockMixin:
    """Row-lock columns of the dstack-style pipelines (see :mod:`danlu.server.services.locks`).

    A worker sets ``lock_token``/``lock_expires_at``/``lock_owner`` when it claims a row,
    works outside any transaction, and writes back only if the token still matches.
    """

    lock_token: Mapped[str | None] = mapped_column(String(64), default=None)
    lock_expires_at: Mapped[float | None] = mapped_column(Double, default=None)
    lock_owner: Mapped[str | None] = mapped_column(String(100), default=None)


class User(Base):
    """A person or service account. ``role`` is ``admin`` or ``user``."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16), default="user")
    created_at: Mapped[float] = mapped_column(Double)
    os_user: Mapped[str | None] = mapped_column(String(32), default=None)
    """The OS account the user's jobs run as with ``DANLU_RUN_AS=user``; None: the account
    named like the user."""
    quota_gpus: Mapped[float | None] = mapped_column(Double, default=None)
    """The most GPUs (whole-GPU equivalents) the user's running jobs may hold at once, in
    all projects (as Slurm's ``MaxTRESPerUser=gres/gpu``); None: no limit of the user's own
    (its projects' quotas still apply)."""
    disabled_at: Mapped[float | None] = mapped_column(Double, default=None)
    """When an admin disabled the user (:mod:`danlu.server.services.disabling`): its tokens
    are refused (its running jobs' own tokens aside), no token is issued to it, and its
    queued jobs are not started until it is enabled again; None: enabled. A disabled user
    stays in the store, so that its jobs' history and usage keep its name."""
    disabled_by: Mapped[str | None] = mapped_column(String(64), default=None)
    """The name of the admin who disabled the user (or who last gave the reason of its
    disable); None while enabled, and for a user disabled before it was recorded."""
    disable_reason: Mapped[str | None] = mapped_column(Text, default=None)
    """Why the admin disabled the user (``danlu user disable NAME --reason TEXT``, at most
    :data:`~danlu.server.services.disabling.MAX_DISABLE_REASON` characters, none of them a
    control character); None while enabled, or when none was given."""

    tokens: Mapped[list[ApiToken]] = relationship(back_populates="user", passive_deletes=True)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def disabled(self) -> bool:
        """Whether an admin disabled the user (:attr:`disabled_at` is set)."""
        return self.disabled_at is not None

    @property
    def account(self) -> str:
        """The OS account the user's jobs run as with ``DANLU_RUN_AS=user``."""
        return self.os_user or self.name


class ApiToken(Base):
    """An API token, stored hashed: ``sha256(token)`` plus a short public ``prefix`` to find
    the row. The plain token is returned once, at issue."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64), default="")
    prefix: Mapped[str] = mapped_column(String(16), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Double)
    last_used_at: Mapped[float | None] = mapped_column(Double, default=None)
    revoked_at: Mapped[float | None] = mapped_column(Double, default=None)
    job_id: Mapped[str | None] = mapped_column(String(32), default=None, index=True)
    """The job whose run the token was issued to (``DANLU_TOKEN``): it may only report that
    job's metrics. ``None``: a user's token, good for every route the user may call."""

    user: Mapped[User] = relationship(back_populates="tokens")


class Project(Base):
    """A project (queue): a priority added to its jobs' priorities, and optional quotas.

    ``quota_gpus`` / ``quota_gpu_memory``: most GPUs (whole-GPU equivalents, milli/1000) and
    GPU bytes its running jobs may hold at once; ``None`` means unlimited. ``share``: its
    weight in the fair-share policy (a project of share 2 is owed twice what one of 1 is).
    """

    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    quota_gpus: Mapped[float | None] = mapped_column(Double, default=None)
    quota_gpu_memory: Mapped[int | None] = mapped_column(BigInteger, default=None)
    share: Mapped[float] = mapped_column(Double, default=1.0, server_default=text("1"))
    created_at: Mapped[float] = mapped_column(Double)


class ProjectMember(Base):
    """A user who may submit jobs to a project. A project without members is open to every
    user (as ``default`` is); one with members, to them and the admins only
    (:mod:`danlu.server.services.members`)."""

    __tablename__ = "project_members"

    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class Job(LockMixin, Base):
    """One submitted job. ``seq`` (the key) is the submission order; ``id`` the public name.

    ``state`` changes only through :func:`danlu.server.services.jobs.change_state` (or its
    batched form), which writes a :class:`JobEvent` in the same transaction. ``version``
    increments on every ORM update and guards against lost updates (optimistic concurrency).
    """

    __tablename__ = "jobs"
    __table_args__ = (
        # covering the scheduling round's key rows (services.view.build_snapshot): read
        # from the index alone, in submission order
        Index(
            "ix_jobs_state_seq_key",
            "state",
            "seq",
            "next_attempt_at",
            "version",
            "observed_version",
            "project_id",
            "held_at",
            "waiting_on",
        ),
        # the deadlines due among the unfinished jobs, however many finished ones had one
        Index("ix_jobs_state_deadline_at", "state", "deadline_at"),
        # the unfinished jobs with a time limit, for the check of the time they ran
        Index("ix_jobs_state_time_limit", "state", "time_limit"),
        # the finished jobs due for the retention's purge, oldest first
        Index("ix_jobs_purged_at_finished_at", "purged_at", "finished_at"),
    )

    seq: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(32), unique=True)
    name: Mapped[str] = mapped_column(String(64))
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    """Incremented at every start and resize: the executor runs attempt N at most once."""
    pending_reason: Mapped[str | None] = mapped_column(Text, default=None)
    allocation: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, default=None)
    """``[{"node": name, "gpu": index, "milli": int, "memory": bytes}, ...]`` or null."""
    batch_size: Mapped[int | None] = mapped_column(Integer, default=None)
    gpu_memory_per_gpu: Mapped[int | None] = mapped_column(BigInteger, default=None)
    """Resolved bytes per GPU (an explicit spec value or the estimate for ``auto``)."""
    micro_batch_limit: Mapped[int | None] = mapped_column(Integer, default=None)
    """The largest per-GPU micro-batch the memory model predicts to fit (estimated at
    submission for elastic jobs with ``training.model``); null when unknown."""
    submitted_at: Mapped[float] = mapped_column(Double)
    started_at: Mapped[float | None] = mapped_column(Double, default=None)
    last_start: Mapped[float | None] = mapped_column(Double, default=None)
    finished_at: Mapped[float | None] = mapped_column(Double, default=None)
    next_attempt_at: Mapped[float | None] = mapped_column(Double, default=None)
    attained_service: Mapped[float] = mapped_column(Double, default=0.0)
    run_time: Mapped[float] = mapped_column(Double, default=0.0)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    checkpoint_step: Mapped[int | None] = mapped_column(BigInteger, default=None)
    last_step: Mapped[int | None] = mapped_column(BigInteger, default=None)
    cancel_requested_at: Mapped[float | None] = mapped_column(Double, default=None)
    cancel_reason: Mapped[str | None] = mapped_column(Text, default=None)
    deadline_at: Mapped[float | None] = mapped_column(Double, default=None)
    """``submitted_at`` plus the spec's ``deadline``: a job not finished by then is cancelled
    (:func:`danlu.server.services.jobs.expired`); null without a deadline."""
    time_limit: Mapped[float | None] = mapped_column(Double, default=None)
    """The spec's ``time_limit``: seconds the job may hold GPUs over all its runs (``run_time``
    plus the current run's time so far) before it is stopped
    (:func:`danlu.server.services.jobs.over_time`); null without one."""
    held_at: Mapped[float | None] = mapped_column(Double, default=None)
    """When the job's owner or an admin held it: a held PENDING job is not scheduled until
    released (:func:`danlu.server.services.jobs.hold`); null when not held."""
    waiting_on: Mapped[str | None] = mapped_column(String(32), default=None)
    """The id of a job this PENDING job depends on (``depends_on``) whose condition is not
    met yet: the scheduler passes the job by until none is left
    (:mod:`danlu.server.services.dependencies`); null when it waits for none."""
    sweep_id: Mapped[str | None] = mapped_column(String(32), default=None, index=True)
    """The id of the sweep this job is a trial of (:class:`Sweep`; sweeps are never deleted);
    null for a job submitted alone."""
    trial: Mapped[int | None] = mapped_column(Integer, default=None)
    """Its trial number within the sweep, from 0."""
    moved_from: Mapped[int | None] = mapped_column(Integer, default=None)
    """The attempt of the run a move left (:func:`~danlu.server.services.jobs.resize`),
    stopping within its preemption grace, whose exit the launch of the job's new run has not
    judged yet (a success ends the job, a failure counts); null when there is none."""
    launched_attempt: Mapped[int | None] = mapped_column(Integer, default=None)
    """The latest attempt whose launch the executor took (written by the reconcile loop after
    the launch): a run of the job's current attempt that the executor no longer knows
    launched (its record vanished), and is counted as a failure, not launched again for
    free as one the control plane never launched (it stopped between the scheduling
    transaction and the launch). 0 from the job's first start until its first launch (each
    new run of a job with a null one sets it: :func:`~danlu.server.services.jobs.not_launched`,
    a run not launched yet is charged no energy); null before the job's first start, and
    for a job recorded running before this column (migration 0032)."""
    purged_at: Mapped[float | None] = mapped_column(Double, default=None)
    """When the retention deleted the finished job's metrics, logs and danlu-made
    checkpoints (:mod:`danlu.server.services.retention`); null while they are kept."""
    marks: Mapped[dict[str, float] | None] = mapped_column(JSON, default=None)
    observed: Mapped[dict[str, float] | None] = mapped_column(JSON, default=None)
    """The last measurement of the job's run from its metric reports (see
    :mod:`danlu.server.services.observe`); null before any and after its GPUs are released."""
    observed_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Incremented with every stored measurement (a Core UPDATE that leaves ``version``)."""
    energy: Mapped[float | None] = mapped_column(Double, default=None)
    """Joules the job's GPUs used over all its runs, as the control plane's energy meter
    charged them (:mod:`danlu.server.energy`; a Core UPDATE that leaves ``version``); null
    where nothing meters its GPUs (a Slurm or Ray cluster's)."""
    version: Mapped[int] = mapped_column(Integer, default=1)

    project: Mapped[Project] = relationship(lazy="joined", innerjoin=True)
    user: Mapped[User] = relationship(lazy="joined", innerjoin=True)

    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012


REASON_PREFIX_LENGTH = 200
"""Characters of a job's ``pending_reason`` in the index below (a whole reason may be longer
than a PostgreSQL index entry can hold)."""
REASON_PREFIX = func.substr(
    Job.pending_reason, literal_column("1"), literal_column(str(REASON_PREFIX_LENGTH))
)
"""The expression the index holds: a query matches it only written the same way, its numbers
literal (SQLite does not match an index expression against bound parameters)."""
# the pending jobs whose waiting reason is not the round's shared one: the round writes that
# reason to these alone, found in the index instead of read from every pending row
Index("ix_jobs_state_reason_prefix", Job.state, REASON_PREFIX)


class Sweep(Base):
    """A hyper-parameter sweep (:class:`~danlu.core.sweep.SweepSpec`): the reconcile loop
    submits its trials as jobs (``Job.sweep_id``) and stops the ones the median rule rules
    out (:mod:`danlu.server.services.sweeps`).

    ``state``: ``RUNNING`` while trials remain to be submitted or run, then ``DONE``;
    ``CANCELLED`` (by its owner or an admin, its unfinished trials with it) or ``FAILED``
    (a trial could no longer be submitted: ``reason`` says why)."""

    __tablename__ = "sweeps"

    seq: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(32), unique=True)
    name: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), index=True)
    submitted: Mapped[int] = mapped_column(Integer, default=0)
    """How many trials were submitted so far (trial numbers ``0..submitted-1``)."""
    estimate: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    """What the trials' ``gpu_memory: auto`` resolved to at submission (``gpu_memory``,
    ``micro_batch_limit``, ``family``), used for every trial."""
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Double)
    finished_at: Mapped[float | None] = mapped_column(Double, default=None)
    judged_at: Mapped[float | None] = mapped_column(Double, default=None)
    """When the median rule last read the trials' metrics (at most every
    :data:`~danlu.server.services.sweeps.JUDGE_EVERY_SECONDS`)."""

    user: Mapped[User] = relationship(lazy="joined", innerjoin=True)


class Webhook(Base):
    """An HTTP endpoint an admin asked to be told of job state changes
    (:mod:`danlu.server.services.webhooks`): every change to one of ``states`` of a job in
    ``project`` (any when null) of ``user`` (any when null) becomes a
    :class:`WebhookDelivery`, written in the transaction of the change."""

    __tablename__ = "webhooks"

    seq: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(32), unique=True)
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(String(128))
    """The key of each delivery's HMAC-SHA256 signature (``X-Danlu-Signature``), shown to
    the admin once, at creation."""
    states: Mapped[list[str]] = mapped_column(JSON)
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id"), default=None)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), default=None)
    created_at: Mapped[float] = mapped_column(Double)
    created_by: Mapped[str] = mapped_column(String(64))

    project: Mapped[Project | None] = relationship(lazy="joined")
    user: Mapped[User | None] = relationship(lazy="joined")


class WebhookDelivery(LockMixin, Base):
    """One message for one :class:`Webhook` (an outbox row): the sender claims due rows with a
    token, posts them outside any transaction and writes the outcome back while the token
    still matches (:class:`danlu.server.webhooks.WebhookSender`). ``done_at`` is set once it
    was delivered (``delivered``) or given up on after the last attempt."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        # the due rows: not done, oldest attempt time first
        Index("ix_webhook_deliveries_done_at_next_attempt_at", "done_at", "next_attempt_at"),
        # the id is the X-Danlu-Delivery header endpoints drop repeats by: on SQLite an id
        # without AUTOINCREMENT is handed out again once the newest rows are deleted
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    webhook_seq: Mapped[int] = mapped_column(
        ForeignKey("webhooks.seq", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(16))
    """``job.state`` (a job's state change, ``payload`` the event) or ``ping``."""
    job_id: Mapped[str | None] = mapped_column(String(32), default=None)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Double)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Double)
    done_at: Mapped[float | None] = mapped_column(Double, default=None)
    delivered: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    """The HTTP status of the last attempt (null when it got no answer)."""
    last_error: Mapped[str | None] = mapped_column(Text, default=None)


class JobEvent(Base):
    """One state change of one job with its reason (``old`` is null for the submission)."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_time", "time"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    time: Mapped[float] = mapped_column(Double)
    old: Mapped[str | None] = mapped_column(String(16))
    new: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")


class UserEvent(Base):
    """One thing that happened to a user's account (:mod:`danlu.server.services.user_events`):
    ``kind`` ``created``, ``changed`` (its OS account or GPU quota), ``disabled``,
    ``enabled``, ``token_issued`` or ``token_revoked`` (never a token's secret; a job run's
    own tokens are not told); ``actor`` the name of the user who did it (null: the control
    plane itself, as its first start making the admin); ``detail`` what changed, in words.
    Kept for good, as job events are, but the token events, which go with their tokens
    (:func:`~danlu.server.services.users.purge_token_events`)."""

    __tablename__ = "user_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    time: Mapped[float] = mapped_column(Double)
    kind: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str | None] = mapped_column(String(64), default=None)
    detail: Mapped[str] = mapped_column(Text, default="")


class NodeEvent(Base):
    """One thing that happened to a node (:mod:`danlu.server.services.node_events`): ``kind``
    ``joined``, ``lost``, ``back``, ``gpus_changed``, ``changed`` (its rack, CPUs or host
    memory), ``cordoned``, ``drained``, ``scheduled`` or ``uncordoned``; ``actor`` the name
    of the user who did it (null: the control plane itself); ``detail`` what, in words.
    ``node`` is the node's name, not its row's id: the history outlives the row (a node gone
    from the inventory loses its row, and finds its history again when it is reported under
    its name). Kept for good, as job events are."""

    __tablename__ = "node_events"
    __table_args__ = (Index("ix_node_events_node_id", "node", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(128))
    time: Mapped[float] = mapped_column(Double)
    kind: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str | None] = mapped_column(String(64), default=None)
    detail: Mapped[str] = mapped_column(Text, default="")


class JobRun(Base):
    """One stretch of a job on its GPUs, written when it ends (the job finished, was
    preempted or moved): from ``started_at`` to ``ended_at`` it held ``gpu_milli``
    thousandths of GPUs and ``gpu_memory`` bytes. The usage report sums them
    (:mod:`danlu.server.services.usage`); the stretches still running are read off the jobs."""

    __tablename__ = "job_runs"
    __table_args__ = (Index("ix_job_runs_ended_at", "ended_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    started_at: Mapped[float] = mapped_column(Double)
    ended_at: Mapped[float] = mapped_column(Double)
    gpu_milli: Mapped[int] = mapped_column(BigInteger)
    gpu_memory: Mapped[int] = mapped_column(BigInteger)


class JobEnergy(Base):
    """The energy one stretch of a job on its GPUs used (the stretch that started at
    ``run_start``: a :class:`JobRun` once it ends), as metered up to ``updated_at``: the
    energy meter adds to it every few seconds while the stretch runs. Project and user are
    the job's, so the usage report reads energy from this table alone."""

    __tablename__ = "job_energy"
    __table_args__ = (
        UniqueConstraint("job_id", "run_start"),
        Index("ix_job_energy_updated_at", "updated_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    run_start: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)
    joules: Mapped[float] = mapped_column(Double)


class JobMetric(Base):
    """A training metric record reported by ``danlu.train`` (step, time, JSON payload), and
    the job's ``attempt`` whose run reported it: a later attempt that reports a step at or
    below a record's went back over it (it resumed from an earlier checkpoint), and the
    list hides the record (:mod:`~danlu.server.services.metrics`)."""

    __tablename__ = "job_metrics"
    __table_args__ = (
        Index("ix_job_metrics_job_id_step", "job_id", "step"),
        # the first step of each of a job's attempts, by seeks (a loose index scan)
        Index("ix_job_metrics_job_id_attempt_step", "job_id", "attempt", "step"),
        # the first step of each rollback generation of an attempt, by seeks
        Index("ix_job_metrics_job_id_rollback", "job_id", "rollback", "attempt", "step"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(BigInteger)
    time: Mapped[float] = mapped_column(Double)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    attempt: Mapped[int | None] = mapped_column(Integer, default=None)
    """The job's attempt (:attr:`Job.attempt`) whose run reported the record; null for a
    record stored before attempts were kept (read as attempt 0, before every run)."""
    rollback: Mapped[int | None] = mapped_column(Integer, default=None)
    """The rollback generation within its attempt (danlu.train's in-process rollback to a
    checkpoint: the replay's records say 1, after a second rollback 2, ...); null for 0. A
    later generation of the attempt hides the earlier ones' records from its first step on."""


class JobMetricKey(Base):
    """The ``Idempotency-Key`` of a metrics POST a job stored, with the number of records it
    stored (``accepted``): the same key again (danlu.train's reporter sends a request again
    when it got no reply) is answered with that count and stores nothing. A job's keys are
    kept a day (:data:`~danlu.server.services.metrics.KEY_DAYS`: the reconcile loop's
    retention pass deletes them after that, :func:`~danlu.server.services.metrics.forget_keys`,
    and with the job's records); (``job_id``, ``key``) is unique, so of two requests with one
    key at once only one is stored."""

    __tablename__ = "job_metric_keys"
    __table_args__ = (
        UniqueConstraint("job_id", "key"),
        Index("ix_job_metric_keys_job_id_created_at", "job_id", "created_at"),
        # the keys of every job past their day, for the retention pass
        Index("ix_job_metric_keys_created_at", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Double)
    accepted: Mapped[int] = mapped_column(Integer)


class Node(Base):
    """A machine in the inventory. ``position`` orders nodes (their index in the view).

    ``cordoned_at``: when the node was closed to new work (None: open), by an operator or
    after :attr:`launch_failures` launches in a row failed for the node's reasons;
    ``draining``: the jobs there are to be preempted by checkpoint (a drain). ``close_at``:
    when a cordon (a drain with ``close_drain``) an operator scheduled takes effect, with
    ``close_reason``. ``open_at``: when the node's cordon or drain ends (a maintenance
    window's end: it is uncordoned then; None: it lasts until uncordoned); ``close_until``:
    the end of the one scheduled for ``close_at`` (its ``open_at`` once it takes effect).
    These survive inventory refreshes (a node keeps its row while it keeps its name)."""

    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    position: Mapped[int] = mapped_column(Integer)
    gpu_type: Mapped[str] = mapped_column(String(64))
    rack: Mapped[str] = mapped_column(String(64), default="rack-0")
    cpu_milli: Mapped[int] = mapped_column(BigInteger, default=0)
    memory: Mapped[int] = mapped_column(BigInteger, default=0)
    fake: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[float] = mapped_column(Double)
    cordoned_at: Mapped[float | None] = mapped_column(Double, default=None)
    cordon_reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    draining: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    launch_failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    close_at: Mapped[float | None] = mapped_column(Double, default=None)
    close_drain: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    close_reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    open_at: Mapped[float | None] = mapped_column(Double, default=None)
    close_until: Mapped[float | None] = mapped_column(Double, default=None)

    gpus: Mapped[list[Gpu]] = relationship(
        back_populates="node", order_by="Gpu.index", cascade="all, delete-orphan"
    )


class Gpu(Base):
    """One GPU of a node: its index on the node, type name, memory in bytes, UUID if known.

    ``cordoned_at``: when this GPU alone was closed to new work (None: open), by an operator
    or by the health check (:mod:`danlu.server.health`), with ``cordon_reason``;
    ``draining``: the jobs holding it are to be preempted by checkpoint. It survives
    inventory refreshes while the node keeps its name and the GPU its position."""

    __tablename__ = "gpus"
    __table_args__ = (
        UniqueConstraint("node_id", "index"),
        # every scheduling round reads the closed GPUs: a few, of thousands
        Index(
            "ix_gpus_cordoned_at",
            "cordoned_at",
            sqlite_where=text("cordoned_at IS NOT NULL"),
            postgresql_where=text("cordoned_at IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    gpu_type: Mapped[str] = mapped_column(String(64))
    memory: Mapped[int] = mapped_column(BigInteger)
    uuid: Mapped[str | None] = mapped_column(String(128), default=None)
    cordoned_at: Mapped[float | None] = mapped_column(Double, default=None)
    cordon_reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    draining: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    node: Mapped[Node] = relationship(back_populates="gpus")


class Counter(Base):
    """A named counter bumped in the transaction that changes what it counts: ``inventory``
    by every change of the nodes and GPUs (:mod:`danlu.server.services.cluster`), so the
    scheduling round rebuilds its inventory only when the counter moved."""

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger, default=0)


class Lease(LockMixin, Base):
    """A named singleton lock (e.g. ``scheduler``: one reconcile loop at a time)."""

    __tablename__ = "leases"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    home: Mapped[str | None] = mapped_column(Text, default=None)
    """The control plane that last held the lease, as
    :func:`~danlu.server.plane_lease.plane_home` names it (its home, with its host for the
    local executor, whose runs are that host's processes); kept when the lease is given back,
    so that a plane of another home can tell that the running jobs' runs are not its own."""
    ttl: Mapped[float | None] = mapped_column(Double, default=None)
    """Seconds the holder's lease lasts unless renewed
    (:func:`~danlu.server.plane_lease.scheduler_lease_ttl` of its ``DANLU_INTERVAL``),
    written when it took it: a plane watching the lease judges the holder by its own TTL
    (:class:`~danlu.server.plane_lease.LeaseWatch`). Null in a row written before revision
    0034 (the watcher's own TTL stands in)."""
