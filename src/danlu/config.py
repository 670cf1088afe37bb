"""Server-side settings: the ONLY server-side module that reads environment variables.

==================== ===================================== ===================================
variable             meaning                               default
==================== ===================================== ===================================
DANLU_HOME           state directory (DB, tokens, logs)    ``~/.danlu``
DANLU_DATABASE_URL   SQLAlchemy URL (sqlite / postgresql)  ``sqlite:///{DANLU_HOME}/danlu.db``
DANLU_POLICY         scheduling policy name                ``priority``
DANLU_POLICY_OPTIONS the policy's options, a JSON object  unset (the policy's defaults)
                     (``{"min_hold": 300}``)
DANLU_INTERVAL       seconds between reconcile rounds      ``2.0``
DANLU_FAKE_GPUS      fake inventory, e.g. ``4x80GiB`` or   unset (use NVML)
                     ``8xH100,8xH100`` (a group a node)
DANLU_EXECUTOR       where jobs run: ``local`` (processes  ``local``
                     on this host), ``slurm`` or ``ray``
DANLU_RAY_ADDRESS    the Ray cluster to join (``ray``)     ``auto`` (this host's cluster)
DANLU_SLURM_PARTITION the Slurm partition danlu owns      unset (Slurm's default one)
DANLU_SLURM_GPU_TYPE GPU type of nodes whose Gres names   ``generic``
                     none danlu knows (``H100``), and the
                     size of a model it names without one
                     (``A100-40GB``: a Gres ``a100`` is one)
DANLU_SLURM_SBATCH_OPTIONS more ``sbatch`` options for    unset
                     every run (``--account=ml --qos=x``)
DANLU_SLURM_PENDING_LIMIT seconds Slurm may keep a run   ``300`` (0: never give up)
                     waiting (PENDING; held, or requeued
                     after it ran, from when first seen
                     so) before it counts as a failed launch
DANLU_INVENTORY_REFRESH seconds between readings of the   ``30`` (0: at start-up only)
                     executor's nodes (Slurm, Ray)
DANLU_RUN_AS         ``server`` (jobs run as the control   ``server``
                     plane's user) or ``user`` (as their
                     user's OS account; local, root)
DANLU_PORT           HTTP port (0: any free port; the      ``8470``
                     home's port before where it is free)
DANLU_URL            server URL for the CLI (overrides     unset (``DANLU_HOME/server.json``)
                     ``DANLU_HOME/server.json``)
DANLU_TOKEN          API token for the CLI                 unset (``DANLU_HOME/admin.token``)
DANLU_MAX_BODY_BYTES the most bytes of a request body     ``33554432`` (32 MiB)
                     (413 past it)
DANLU_LOG_MAX_MB     the most MiB of a job's log (every    ``1024`` (0: no cap)
                     executor's); past it, its newest part
                     moves to ``JOB.log.1`` and the log
                     starts anew
==================== ===================================== ===================================

A setting of one executor (``DANLU_RAY_ADDRESS``, ``DANLU_SLURM_*``) with another executor
is refused at start-up (:func:`check_executor_settings`), not ignored.

The webhook sender's proxies come from the usual ``HTTPS_PROXY``, ``HTTP_PROXY``,
``ALL_PROXY`` and ``NO_PROXY`` (:func:`outbound_proxies`).

An empty variable (``DANLU_PORT=``) is unset: its default holds (``DANLU_TRACE_MODULES=``
alone means something, no modules); a blank ``DANLU_HOME``, ``DANLU_URL`` or ``DANLU_TOKEN``
too. Nothing is read at import: call :func:`load_settings`. Errors are
:class:`~danlu.core.errors.ConfigError` naming the variable and the fix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from danlu.core.cluster import gpu_type
from danlu.core.errors import ConfigError, UnknownNameError
from danlu.core.fake_gpus import FakeGroup
from danlu.core.setting_values import check_database_url as check_database_url
from danlu.core.setting_values import check_fake_gpus as check_fake_gpus
from danlu.core.setting_values import normalise_database_url as normalise_database_url
from danlu.core.setting_values import parse_option_pairs as parse_option_pairs
from danlu.core.setting_values import parse_policy_options as parse_policy_options
from danlu.core.setting_values import split_sbatch_options as split_sbatch_options
from danlu.core.setting_values import sqlite_url as sqlite_url
from danlu.core.spec_errors import value_message
from danlu.core.units import parse_bytes
from danlu.core.values import plain_number_text

ENV_PREFIX = "DANLU_"
DEFAULT_TRACE_MODULES = ("danlu.estimate.zoo",)
"""What ``DANLU_TRACE_MODULES`` allows by default: danlu's own model zoo."""
_HINTS: dict[str, str] = {
    "home": "a directory path, e.g. DANLU_HOME=/var/lib/danlu",
    "database_url": (
        "an SQLAlchemy URL, e.g. sqlite:////var/lib/danlu/danlu.db or "
        "postgresql+psycopg://user:password@host:5432/danlu"
    ),
    "policy": "a policy name, e.g. DANLU_POLICY=priority",
    "policy_options": (
        "a JSON object of the policy's options, e.g. "
        'DANLU_POLICY_OPTIONS=\'{"min_hold": 300, "hysteresis": 0.2}\''
    ),
    "interval": "a positive, finite number of seconds, e.g. DANLU_INTERVAL=2.0",
    "fake_gpus": (
        "one node per comma-separated group, e.g. DANLU_FAKE_GPUS=4x80GiB, or 8xH100,8xH100 "
        "for two nodes of eight H100s"
    ),
    "port": "a TCP port 0..65535 (0: any free port), e.g. DANLU_PORT=8470",
    "max_body_bytes": (
        "a number of bytes from 1024 to 2**30, or a size with a unit as a job spec's "
        "(KiB, MiB, GiB binary; KB, MB, GB decimal), e.g. DANLU_MAX_BODY_BYTES=33554432 or 32MiB"
    ),
    "log_max_mb": (
        "a number of MiB (0: no cap, else at least 1, at most 1048576), or a size with a unit "
        "as a job spec's (KiB, MiB, GiB binary; KB, MB, GB decimal), e.g. DANLU_LOG_MAX_MB=1024 "
        "or 2GiB"
    ),
    "executor": "local, slurm or ray, e.g. DANLU_EXECUTOR=slurm",
    "ray_address": "a Ray address, e.g. DANLU_RAY_ADDRESS=10.0.0.1:6379 or auto",
    "run_as": "server or user, e.g. DANLU_RUN_AS=user (jobs run as their user's OS account)",
    "inventory_refresh": (
        "seconds 0..86400 between readings of the cluster's nodes, e.g. "
        "DANLU_INVENTORY_REFRESH=30 (0: only at start-up)"
    ),
    "preempt_grace": (
        "seconds (above 0, at most 3600) a preempted job has to checkpoint, e.g. "
        "DANLU_PREEMPT_GRACE=30"
    ),
    "energy_interval": (
        "seconds 0..3600 between readings of the GPUs' energy, e.g. DANLU_ENERGY_INTERVAL=10 "
        "(0: no meter)"
    ),
    "health_interval": (
        "seconds 0..3600 between checks of the GPUs' health, e.g. DANLU_HEALTH_INTERVAL=30 "
        "(0: no check)"
    ),
    "health_drain": "true or false, e.g. DANLU_HEALTH_DRAIN=true",
    "health_program": (
        "the absolute path of an executable, e.g. DANLU_HEALTH_PROGRAM=/usr/local/sbin/check-node"
    ),
    "slurm_partition": "a Slurm partition name, e.g. DANLU_SLURM_PARTITION=gpu",
    "slurm_gpu_type": "a GPU type, e.g. DANLU_SLURM_GPU_TYPE=H100",
    "slurm_sbatch_options": (
        "sbatch options, split as a shell would (nothing runs them through one), e.g. "
        "DANLU_SLURM_SBATCH_OPTIONS='--account=ml --qos=normal'"
    ),
    "slurm_pending_limit": (
        "seconds 0..86400, e.g. DANLU_SLURM_PENDING_LIMIT=600 (0: never give up a waiting run)"
    ),
    "estimate_warm_workers": "a count 0..16, e.g. DANLU_ESTIMATE_WARM_WORKERS=1",
    "trace_modules": (
        "comma-separated Python packages or modules, e.g. "
        "DANLU_TRACE_MODULES=danlu.estimate.zoo,mycompany.models (empty: trace none)"
    ),
}
EXECUTORS = ("local", "slurm", "ray")
"""The executors the server can run jobs with (``DANLU_EXECUTOR``)."""
_PARTITION = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _unset_home(value: Any) -> Any:
    """An empty (or blank) ``DANLU_HOME`` is unset, as every other empty ``DANLU_*``: the
    default ``~/.danlu``, not the current directory."""
    if isinstance(value, str) and not value.strip():
        return DEFAULT_HOME
    return value


DEFAULT_HOME = Path("~/.danlu")
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
"""The default cap on a request's body, in bytes: the largest legitimate one, a batch of
1,000 metric records of at most 16 KiB of JSON each (about 16 MiB), fits twice."""


_MIB = 1024**2
DEFAULT_LOG_MAX_MB = 1024.0
"""The default cap on a job's log, in MiB (``DANLU_LOG_MAX_MB``)."""


def _size_with_unit(value: Any, unit: int) -> Any:
    """A setting's text with a unit (``32MiB``, ``2GiB``, ``500MB``) in ``unit`` bytes, read
    as a job spec's sizes are (:func:`~danlu.core.units.parse_bytes`); any other value as
    given (a bare number is already in ``unit``)."""
    if isinstance(value, str) and re.search(r"[A-Za-z]", value):
        size = parse_bytes(value, "")
        return size if unit == 1 else size / unit
    return value


_EMPTY_MEANS_SOMETHING = frozenset({"trace_modules"})
"""Settings whose empty value is not the default: ``DANLU_TRACE_MODULES=`` traces none."""


class Settings(BaseSettings):
    """The server's settings, from ``DANLU_*`` environment variables or keyword overrides.
    An empty value is unset (:meth:`_empty_is_unset`)."""

    # not env_ignore_empty: it would read DANLU_TRACE_MODULES= (none) as the default
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    home: Path = Field(default=Path("~/.danlu"))
    database_url: str | None = None
    policy: str = "priority"
    policy_options: str | None = None
    """The policy's options as a JSON object (see :attr:`policy_knobs`); names and values
    are checked when the reconcile loop builds the policy."""
    interval: float = Field(default=2.0, gt=0, allow_inf_nan=False)
    fake_gpus: str | None = None
    port: int = Field(default=8470, ge=0, le=65535)
    """0: any free port (as ``danlu up --port 0``)."""
    estimate_warm_workers: int = Field(default=1, ge=0, le=16)
    """Memory-estimate workers kept started ahead of need once the first ``gpu_memory: auto``
    submission has been traced (each holds an imported torch, a few hundred MB), so later
    submissions skip the worker's ~3-5 s start-up; 0: every trace starts its own."""

    node_launch_failures: int = Field(default=3, ge=0, le=1000)
    """Launches in a row that may fail on a node for the node's own reasons (its disk full,
    out of processes or memory) before the reconcile loop cordons it (closes it to new work
    until ``danlu uncordon``); 0: never."""

    max_jobs_per_user: int = Field(default=0, ge=0, le=1_000_000_000)
    """Unfinished jobs (queued, held, waiting or running) one user may have: a submission
    past it is refused with 409 until some finish (as Slurm's ``MaxSubmitJobs``), so that a
    runaway script cannot fill the store. A sweep's trials count: a sweep or job array is
    refused when its first ``parallel`` trials would pass it, its later trial submissions
    never. 0: no limit."""

    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024, le=1 << 30)
    """The most bytes a request body may take: a larger one is refused with 413 before it is
    read (twice a batch of 1,000 metric records of 16 KiB)."""

    log_max_mb: float = Field(default=DEFAULT_LOG_MAX_MB, ge=0, le=1 << 20, allow_inf_nan=False)
    """The most MiB a job's log may take: past it, the log's newest part (half the cap, at
    most 256 MiB) moves to ``JOB_ID.log.1`` and the log starts anew with a line saying so
    (:mod:`danlu.executors.logcap`); :attr:`log_max_bytes` in bytes. 0: no cap. Every
    executor's: checked at each heartbeat of a local job's supervisor, every half second by
    the task of a Slurm run's first node (:mod:`danlu.executors.slurm_task`), at each poll
    that appends a Ray run's output (:mod:`danlu.executors.ray_output`)."""

    retention_days: float = Field(default=0.0, ge=0, le=36500, allow_inf_nan=False)
    """Days a finished job keeps its stored metrics, its logs and run records and the
    checkpoint directory danlu made for it (never a spec's ``checkpoint_dir``); after that
    the reconcile loop deletes them, keeping the job and its events. 0: keep everything."""

    executor: str = "local"
    """Where jobs run: ``local`` (supervised processes on this host), ``slurm`` (a batch
    job each, on the nodes of :attr:`slurm_partition`; :mod:`danlu.executors.slurm`) or
    ``ray`` (Ray actors on the nodes of the cluster at :attr:`ray_address`;
    :mod:`danlu.executors.ray_executor`)."""
    ray_address: str = "auto"
    """The Ray cluster the ``ray`` executor joins (``auto``: the one this host belongs to)."""
    run_as: str = "server"
    """Which OS account a job runs as: ``server``, the control plane's own; ``user``, the
    account named like the job's danlu user (never root), which needs the local executor and
    a control plane run as root (:mod:`danlu.server.run_as`)."""
    inventory_refresh: float = Field(default=30.0, ge=0, le=86400, allow_inf_nan=False)
    """Seconds between two readings of the executor's nodes by the reconcile loop: nodes
    that joined a Slurm partition or a Ray cluster are scheduled onto, and the jobs on nodes
    that left are re-queued to resume from their checkpoints. 0: read them only at start-up.
    The local executor's GPUs are read once whatever this says."""
    preempt_grace: float = Field(default=30.0, gt=0, le=3600, allow_inf_nan=False)
    """Seconds a job has, after SIGTERM, to checkpoint and exit when it is preempted, moved to
    other GPUs or drained, before SIGKILL; a job's spec may ask for its own
    (``preempt_grace``, up to an hour)."""
    energy_interval: float = Field(default=10.0, ge=0, le=3600, allow_inf_nan=False)
    """Seconds between two readings of the GPUs' energy, charged to the jobs holding them
    (:mod:`danlu.server.energy`): the control plane's own GPUs (NVML's energy counters, or
    the fake GPUs' synthetic draw); a Slurm or Ray cluster's are not metered. 0: no meter."""
    health_interval: float = Field(default=30.0, ge=0, le=3600, allow_inf_nan=False)
    """Seconds between two checks of the GPUs' health (:mod:`danlu.server.health`): a GPU
    NVML finds faulty (lost, uncorrectable ECC errors, a row remapping or page retirement
    waiting for a reset, a critical Xid) is closed to new work. The control plane's own NVML
    GPUs only (fake GPUs have no faults; a Slurm or Ray cluster's are not read). 0: no
    check."""
    health_drain: bool = False
    """Drain the GPUs the health check finds faulty, not only close them to new work: their
    jobs are preempted by checkpoint and resume on other GPUs. False: the jobs there run on
    (and resume elsewhere, with no restart counted, if they fail)."""
    health_program: str | None = None
    """An executable an admin provides (as Slurm's ``HealthCheckProgram``), run with no
    arguments and no shell on the control plane's host every :attr:`health_interval`
    seconds with the local executor: when it exits non-zero (or runs over a minute), this
    host's nodes are cordoned with its first line of output as the reason, and reopened
    once it passes again (:mod:`danlu.server.health`). None: no program."""
    slurm_partition: str | None = None
    """The Slurm partition whose nodes danlu schedules (None: Slurm's default partition)."""
    slurm_gpu_type: str = "generic"
    """The GPU type of Slurm nodes whose ``Gres`` names no type danlu knows."""
    slurm_sbatch_options: str | None = None
    """More ``sbatch`` options for every run, split as a shell would split them (an account,
    a QoS, memory per CPU); the run's own (nodes, output, job name) come after and win."""
    slurm_pending_limit: float = Field(default=300.0, ge=0, le=86400, allow_inf_nan=False)
    """Seconds Slurm may keep a run ``PENDING`` after its submission (danlu placed it on nodes
    it counts free, so Slurm should start it at once) before the executor cancels it and it
    counts as a failed launch; 0: never. A run held after a requeue (``REQUEUE_HOLD``...) has
    as long from when it was first seen held, and one requeued after it ran (``PENDING``
    again) from when it was first seen so (:mod:`danlu.executors.slurm_waiting`)."""

    trace_modules: str = ",".join(DEFAULT_TRACE_MODULES)
    """The packages or modules, comma-separated, whose model factories the server may import
    and call to estimate a submitted job's memory (``training.model``, traced in a
    subprocess of the server). The submitter names the factory, so only code an admin
    listed here runs; a job naming another falls back to whole GPUs, with the reason."""

    @model_validator(mode="before")
    @classmethod
    def _empty_executor_setting_is_not_given(cls, data: Any) -> Any:
        """An empty setting of an executor (``DANLU_RAY_ADDRESS=``) left out, so that it is
        not among the settings given (``model_fields_set``), which
        :func:`check_executor_settings` refuses for another executor at any value."""
        if not isinstance(data, dict):
            return data
        executor_fields = {name for name, _owner, _shown in EXECUTOR_SETTINGS}
        return {k: v for k, v in data.items() if not (k in executor_fields and v == "")}

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any, info: ValidationInfo) -> Any:
        """An empty value (``DANLU_PORT=``) is unset: the field's default, as the docstring
        of :func:`_unset_home` says of every ``DANLU_*``; not for
        :data:`_EMPTY_MEANS_SOMETHING`."""
        name = info.field_name
        if value == "" and name is not None and name not in _EMPTY_MEANS_SOMETHING:
            return cls.model_fields[name].get_default(call_default_factory=True)
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _plain_number(cls, value: Any, info: ValidationInfo) -> Any:
        """A number setting given as text must be written plainly, in ASCII digits without
        ``_`` (:func:`~danlu.core.values.plain_number_text`): pydantic, as ``int``, read
        ``DANLU_PORT=8_470`` as 8470 and ``DANLU_INTERVAL=1_0`` as 10, so a typo ran the
        server with another value than meant."""
        name = info.field_name
        if (
            isinstance(value, str)
            and name is not None
            and cls.model_fields[name].annotation in (int, float)
            and not plain_number_text(value)
        ):
            raise ValueError(f"{value!r} is not a number written plainly (digits, no '_')")
        return value

    @field_validator("max_body_bytes", mode="before")
    @classmethod
    def _body_size(cls, value: Any) -> Any:
        """A size with a unit (``32MiB``, ``64MB``) read as a job spec's sizes are
        (:func:`~danlu.core.units.parse_bytes`: ``KiB``, ``MiB``, ``GiB`` binary, ``K``,
        ``KB``, ``M``, ``MB``... decimal): it was refused as no integer, while every other
        size danlu reads (a spec's, ``--gpu-memory``, ``--quota-memory``,
        ``DANLU_FAKE_GPUS``) took one. A bare number is bytes, as before."""
        return _size_with_unit(value, 1)

    @field_validator("log_max_mb", mode="before")
    @classmethod
    def _log_size(cls, value: Any) -> Any:
        """A size with a unit (``2GiB``, ``500MB``) read as :meth:`_body_size` reads one,
        in MiB; a bare number is MiB."""
        return _size_with_unit(value, _MIB)

    @field_validator("log_max_mb", mode="after")
    @classmethod
    def _log_cap(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError(f"{value:g} MiB is below the least cap, 1 MiB (0: no cap)")
        return value

    @property
    def log_max_bytes(self) -> int:
        """:attr:`log_max_mb` in bytes (0: no cap)."""
        return int(self.log_max_mb * _MIB)

    @field_validator("home", mode="before")
    @classmethod
    def _home_unset(cls, value: Any) -> Any:
        return _unset_home(value)

    @field_validator("home", mode="after")
    @classmethod
    def _home(cls, value: Path) -> Path:
        """Absolute: the paths under it go to jobs (``DANLU_CHECKPOINT_DIR``), which start
        in directories of their own."""
        return value.expanduser().absolute()

    @field_validator("health_program", mode="after")
    @classmethod
    def _health_program(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not Path(value.strip()).is_absolute():
            raise ValueError(f"{value.strip()!r} is not an absolute path")
        return value.strip()

    @field_validator("trace_modules", mode="after")
    @classmethod
    def _trace_modules(cls, value: str) -> str:
        for part in value.split(","):
            if part.strip() and not _MODULE.match(part.strip()):
                raise ValueError(f"{part.strip()!r} is not a dotted module name")
        return value

    @property
    def trace_module_names(self) -> tuple[str, ...]:
        """:attr:`trace_modules` as a tuple of names."""
        return tuple(p.strip() for p in self.trace_modules.split(",") if p.strip())

    @field_validator("run_as", mode="after")
    @classmethod
    def _run_as(cls, value: str) -> str:
        if value.strip().lower() not in ("server", "user"):
            raise ValueError(f"unknown mode {value!r}")
        return value.strip().lower()

    @field_validator("executor", mode="after")
    @classmethod
    def _executor(cls, value: str) -> str:
        if value.strip().lower() not in EXECUTORS:
            raise ValueError(f"unknown executor {value!r}")
        return value.strip().lower()

    @field_validator("slurm_gpu_type", mode="after")
    @classmethod
    def _slurm_gpu_type(cls, value: str) -> str:
        try:
            return gpu_type(value).name
        except UnknownNameError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("slurm_partition", mode="after")
    @classmethod
    def _slurm_partition(cls, value: str | None) -> str | None:
        if value is not None and not _PARTITION.match(value.strip()):
            raise ValueError(f"{value!r} is not a partition name")
        return value.strip() if value else None

    @field_validator("slurm_sbatch_options", mode="after")
    @classmethod
    def _sbatch_options(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            split_sbatch_options(value)
            return value
        return None

    @property
    def sbatch_options(self) -> tuple[str, ...]:
        """:attr:`slurm_sbatch_options` as argv items."""
        return split_sbatch_options(self.slurm_sbatch_options or "")

    @field_validator("database_url", mode="after")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return check_database_url(value) if value else None

    @field_validator("fake_gpus", mode="after")
    @classmethod
    def _fake(cls, value: str | None) -> str | None:
        if value:
            try:
                check_fake_gpus(value)
            except ConfigError as exc:
                raise ValueError(str(exc).removeprefix("DANLU_FAKE_GPUS: ")) from None
        return value or None

    @field_validator("policy", mode="after")
    @classmethod
    def _policy(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the policy name is empty")
        return value.strip()

    @field_validator("policy_options", mode="after")
    @classmethod
    def _policy_options(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            parse_policy_options(value)
            return value
        return None

    @property
    def policy_knobs(self) -> dict[str, Any]:
        """The parsed :attr:`policy_options` (empty when unset): JSON lists become tuples,
        as the policies' list options are tuples."""
        return parse_policy_options(self.policy_options) if self.policy_options else {}

    @property
    def db_url(self) -> str:
        """The database URL, defaulting to SQLite at ``{home}/danlu.db`` whatever characters
        the home's path holds (:func:`sqlite_url`). Raises :class:`ConfigError` naming
        ``--home`` for a home no URL can name."""
        if self.database_url:
            return self.database_url
        try:
            return sqlite_url(self.home / "danlu.db")
        except ValueError as exc:
            raise ConfigError(
                f"--home {str(self.home)!r} (DANLU_HOME): {exc}; give a home whose path is "
                "UTF-8 text, or name the database with --database-url (DANLU_DATABASE_URL)"
            ) from None

    @property
    def admin_token_path(self) -> Path:
        """Where the bootstrap admin token is written (mode 0600)."""
        return self.home / "admin.token"

    @property
    def fake_groups(self) -> tuple[FakeGroup, ...] | None:
        """The groups (a node each) of the fake inventory :attr:`fake_gpus` describes
        (:func:`check_fake_gpus`), or ``None`` to discover GPUs."""
        return check_fake_gpus(self.fake_gpus) if self.fake_gpus else None


EXECUTOR_SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("slurm_partition", "slurm", "--slurm-partition (DANLU_SLURM_PARTITION)"),
    ("slurm_gpu_type", "slurm", "DANLU_SLURM_GPU_TYPE"),
    ("slurm_sbatch_options", "slurm", "DANLU_SLURM_SBATCH_OPTIONS"),
    ("slurm_pending_limit", "slurm", "DANLU_SLURM_PENDING_LIMIT"),
    ("ray_address", "ray", "--ray-address (DANLU_RAY_ADDRESS)"),
)
"""The settings of one executor: (field, the executor it applies to, its flag and variable
as errors name them)."""


def check_executor_settings(settings: Settings, fake_gpus: str | None = None) -> None:
    """Refuse, with a :class:`ConfigError` naming the flag, the variable and the fix, a
    setting that does nothing for the executor ``settings`` name: one of another executor's
    :data:`EXECUTOR_SETTINGS` given (a flag or a variable that is not empty), even at its
    default's value, or set to other than its default (``--ray-address`` without
    ``--executor ray`` was ignored, and the jobs ran on this host; ``--ray-address auto``
    too, which is the default), or fake GPUs
    (``fake_gpus``, the ``--fake-gpus`` flag, or :attr:`Settings.fake_gpus`) for a cluster's
    executor. Called before anything is made, so a variable the environment sets for some
    other purpose stops the start-up by its name."""
    for name, owner, shown in EXECUTOR_SETTINGS:
        changed = getattr(settings, name) != Settings.model_fields[name].get_default()
        given = changed or name in settings.model_fields_set
        if given and settings.executor != owner:
            variable = ENV_PREFIX + name.upper()
            raise ConfigError(
                f"{shown} applies to --executor {owner}, not to the {settings.executor} "
                f"executor; add --executor {owner} (DANLU_EXECUTOR={owner}), or leave it out "
                f"(unset {variable} if the environment sets it)"
            )
    if settings.executor != "local" and (fake_gpus or settings.fake_gpus):
        raise ConfigError(
            f"--fake-gpus (DANLU_FAKE_GPUS) does not apply to the {settings.executor} "
            "executor, whose GPUs are the cluster's; leave it out, or use --executor local"
        )


def load_settings(*, flags: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Read the settings (keyword overrides win over the environment).

    Raises :class:`ConfigError` naming the ``DANLU_*`` variable and how to fix it; for a
    value given as an override that ``flags`` names the command-line flag of (``interval``:
    ``--interval``), the flag first (``--interval (DANLU_INTERVAL): ...``): the user typed
    the flag, not the variable.
    """
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        variable = ENV_PREFIX + name.upper()
        if flags and name in overrides and name in flags:
            variable = f"{flags[name]} ({variable})"
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        msg = value_message(err) or msg  # with the value: pydantic's "Input should be ..."
        hint = _HINTS.get(name, "")
        raise ConfigError(f"{variable}: {msg}" + (f"; expected {hint}" if hint else "")) from None


class ClientSettings(BaseSettings):
    """Where the CLI finds the server: ``DANLU_HOME`` (``server.json`` + ``admin.token``), and
    ``DANLU_URL`` / ``DANLU_TOKEN``, which override what the home holds."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", frozen=True, env_ignore_empty=True
    )

    home: Path = Field(default=Path("~/.danlu"))
    url: str | None = None
    token: str | None = None

    @field_validator("url", "token", mode="after")
    @classmethod
    def _blank_unset(cls, value: str | None) -> str | None:
        """A blank ``DANLU_URL`` or ``DANLU_TOKEN`` is unset (the home's server and token),
        not the server at ``""``."""
        return value.strip() if value is not None and value.strip() else None

    @field_validator("home", mode="before")
    @classmethod
    def _home_unset(cls, value: Any) -> Any:
        return _unset_home(value)

    @field_validator("home", mode="after")
    @classmethod
    def _home(cls, value: Path) -> Path:
        return value.expanduser()


def load_client_settings(
    home: Path | None = None, url: str | None = None, token: str | None = None
) -> ClientSettings:
    """The CLI's connection settings: flags (when not ``None``) win over ``DANLU_HOME``,
    ``DANLU_URL`` and ``DANLU_TOKEN``; the home defaults to ``~/.danlu``."""
    overrides: dict[str, Any] = {
        k: v for k, v in {"home": home, "url": url, "token": token}.items() if v
    }
    try:
        return ClientSettings(**overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        msg = err.get("msg", "invalid value")
        raise ConfigError(f"{ENV_PREFIX}{name.upper()}: {msg}") from None


def job_base_env() -> dict[str, str]:
    """The environment jobs start from: this process's, minus every ``DANLU_*`` variable (the
    executor sets the job's own). Read here because config.py is the server side's only
    reader of environment variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}


GPU_DISCOVERY_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
"""The variables of the environment :func:`danlu.devices.discover` reads."""


def gpu_discovery_env() -> dict[str, str]:
    """The variables of this process's environment that GPU discovery reads
    (:data:`GPU_DISCOVERY_VARIABLES`: :func:`danlu.devices.discover` serves only the GPUs
    ``CUDA_VISIBLE_DEVICES`` shows, and warns of one naming GPUs by index on a host of two
    GPU models unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, as CUDA numbers them otherwise).
    Read here: config.py is the server side's only reader of the environment."""
    return {k: v for k, v in os.environ.items() if k in GPU_DISCOVERY_VARIABLES}


def caller_env() -> dict[str, str]:
    """The environment of the process running the CLI, for ``danlu run --env NAME`` (which
    passes on a variable by name). Read here: config.py is the only reader of environment
    variables outside the job side."""
    return dict(os.environ)


PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")
"""The proxy URL schemes httpx takes (SOCKS needs the ``socksio`` package)."""


@dataclass(frozen=True)
class OutboundProxies:
    """The proxies of the control plane's own outgoing posts (the webhooks): ``http`` for an
    http:// URL, ``https`` for an https:// one (None: straight to the host), never for a host
    ``no_proxy`` names (``NO_PROXY``'s entries: ``*`` for every host, a host name, an IP
    address, or a domain whose hosts all count, ``example.com`` or ``.example.com``)."""

    http: str | None = None
    https: str | None = None
    no_proxy: tuple[str, ...] = ()


def _proxy_variable(name: str) -> tuple[str, str] | None:
    """``name``'s value, lower case first (as urllib and curl read it), and the spelling it
    was found under; None when unset or empty."""
    for spelling in (name.lower(), name.upper()):
        value = os.environ.get(spelling, "").strip()
        if value:
            return spelling, value
    return None


def _proxy_url(name: str) -> str | None:
    """The proxy URL in variable ``name`` (``http://`` added to a bare ``host:port``, as
    httpx and curl do); ConfigError naming the variable for one httpx cannot use."""
    found = _proxy_variable(name)
    if found is None:
        return None
    spelling, value = found
    url = value if "://" in value else f"http://{value}"
    try:
        parts = urlsplit(url)
        _ = parts.port  # a ValueError for a port that is not a number or out of range
    except ValueError as exc:
        raise ConfigError(f"{spelling}: {value!r} is not a proxy URL ({exc})") from None
    if parts.scheme.lower() not in PROXY_SCHEMES or not parts.hostname:
        raise ConfigError(
            f"{spelling}: {value!r} is not a proxy URL; expected "
            f"{' / '.join(PROXY_SCHEMES)}://HOST:PORT, e.g. {spelling}=http://proxy.example:3128"
        )
    return url


def outbound_proxies() -> OutboundProxies:
    """The proxies of the webhook posts, from the environment: an https:// URL goes through
    ``HTTPS_PROXY``, an http:// URL through ``HTTP_PROXY`` or, when that is unset,
    ``HTTPS_PROXY``; ``ALL_PROXY`` when neither is set; none to a host ``NO_PROXY`` names
    (comma-separated). Each name lower case or upper case (the lower case wins); an empty one
    is unset. Read here: config.py is the server side's only reader of the environment."""
    every = _proxy_url("all_proxy")
    https = _proxy_url("https_proxy") or every
    http = _proxy_url("http_proxy") or https
    names = (_proxy_variable("no_proxy") or ("", ""))[1]
    return OutboundProxies(
        http=http,
        https=https,
        no_proxy=tuple(part.strip() for part in names.split(",") if part.strip()),
    )
