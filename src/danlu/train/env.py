"""The job environment: the ONE place where ``danlu.train`` reads environment variables.

A job started by danlu receives these variables (every one optional, so the same script runs
anywhere; off the cluster every part of ``danlu.train`` falls back to a do-nothing default):

=========================  ====================================================================
``DANLU_JOB_ID``           the job's id; metrics are reported under it
``DANLU_API_URL``          base URL of the danlu API (``http://host:port``); when set together
                           with ``DANLU_JOB_ID`` metrics are POSTed to
                           ``{DANLU_API_URL}/api/v1/jobs/{DANLU_JOB_ID}/metrics``
``DANLU_TOKEN``            bearer token sent as ``Authorization: Bearer <token>``
``DANLU_CHECKPOINT_DIR``   where checkpoints go (a local path or an fsspec URL such as ``s3://``)
``DANLU_GPU_MEMORY_LIMIT`` bytes this job may use on each GPU, its CUDA context included
                           (the caching allocator is capped at it less the context:
                           :mod:`danlu.train.memory_cap`): a byte count or a size with a
                           unit, as a job spec's (``8GB``, ``8GiB``)
``DANLU_GPU_CONTEXT_BYTES`` the CUDA context the control plane's memory estimate allowed for
                           on the GPU type of this job's node, in bytes (a byte count or a
                           size with a unit): the cap under ``DANLU_GPU_MEMORY_LIMIT`` leaves
                           out at least that much, not the built-in GPU table's figure for the
                           device (:mod:`danlu.train.memory_cap`); unset, the table's
``DANLU_BATCH_SIZE``       the scheduler's choice of the per-GPU micro-batch size; the global
                           batch stays what the script asks for, accumulation makes up the rest
``DANLU_GLOBAL_BATCH_SIZE`` the scheduler's choice of the global batch (a policy that co-adapts
                           batch and GPUs sets it); it replaces the script's, the LR is scaled
                           from the script's batch by the ``lr_scaling`` rule
``DANLU_RESTART_COUNT``    how many times danlu has restarted this job (0 on the first run)
``DANLU_METRICS_FILE``     JSONL file for metrics when no API is configured (optional)
``DANLU_HPARAMS``          a sweep trial's hyper-parameters, a JSON object (``JobEnv.hparams``;
                           ``{}`` outside a sweep)
``DANLU_SWEEP_ID``         the id of the sweep this job is a trial of
``DANLU_TRIAL``            its trial number within the sweep, from 0
``DANLU_ARRAY_INDEX``      a job array task's index (``danlu submit --array 0-99``;
                           ``JobEnv.array_index``)
``DANLU_PRECISION``        the job spec's ``training.precision`` when it names ``fp16`` or
                           ``bf16`` (``JobEnv.precision``): ``danlu.train.init``'s default
                           precision, the one the control plane's memory estimate was made
                           for (``fp32``, ``fp16`` or ``bf16``; any case, ``32`` and ``16``
                           also)
``SLURM_JOB_END_TIME``     Slurm's own: when its time limit ends the job (POSIX seconds), on
                           the Slurm executor; a SIGTERM at or after it is logged as Slurm's
                           time limit (``JobEnv.slurm_job_end_time``; a value that is not
                           digits is ignored: it is Slurm's, not danlu's, and only names a
                           stop)
=========================  ====================================================================

and, for distributed runs, torchrun's own: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_RESTART_COUNT``,
``TORCHELASTIC_RUN_ID``, ``GROUP_RANK``.

Exit codes
----------
:data:`PREEMPTED_EXIT_CODE` (75, ``EX_TEMPFAIL`` of ``sysexits.h``: "temporary failure, try
again later") is the code a job exits with after it received SIGTERM, wrote a checkpoint at the
next step boundary and stopped cleanly. The executor re-queues a job that exits with it; any
other non-zero code is a failure. 75 rather than 143 (= 128 + SIGTERM) because 143 is also what
a shell reports for a process that was killed by SIGTERM *without* checkpointing.

A job that cannot fit its memory has no exit code of its own: when even the smallest
micro-batch runs out of memory, the OOM guard raises
:class:`~danlu.train.batch.MicroBatchOutOfMemoryError`, and the last line of its traceback in
the job's log (``MicroBatchOutOfMemoryError: out of memory even at micro-batch N``) is the
verdict the executors read (``danlu.executors.base.CANNOT_FIT_MARK``); the control plane then
ends the job FAILED at once, with no restart. The log carries it on every executor (local,
Slurm, Ray), and through torchrun, whose agent exits 1 whatever its workers exited with.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from danlu.core.errors import ConfigError, SpecError
from danlu.core.spec_training import Precision, precision_name
from danlu.core.units import parse_bytes

PREEMPTED_EXIT_CODE = 75
"""Exit code of a job that checkpointed and stopped after SIGTERM (re-queue it)."""

__all__ = ["PREEMPTED_EXIT_CODE", "JobEnv"]


_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
"""An integer as the executors and launchers write one: digits 0-9 (not ``1_000`` or another
script's digits, which ``int()`` takes), at most 18 of them (a 400-digit count passed here
and failed later, a bare OverflowError)."""


def _stripped(environ: Mapping[str, str], name: str) -> str | None:
    """``name``'s value without surrounding whitespace, None when unset, empty or only
    whitespace: every variable is read through here. A value from an env file edited on
    Windows ends in ``\\r``, and one from a launcher's template may carry blanks; kept, they
    named a checkpoint directory ``ckpt\\r`` or a rendezvous host ``host\\r``. A number or a
    choice of only whitespace takes its default; a name or a path is refused
    (:func:`_name`)."""
    raw = environ.get(name)
    value = raw.strip() if raw is not None else ""
    return value or None


def _int(environ: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = _stripped(environ, name)
    if raw is None:
        return default
    if not _INTEGER.fullmatch(raw):
        raise ConfigError(
            f"environment variable {name}={raw[:40]!r} is not an integer (digits 0-9, at most "
            "18 of them)"
        )
    return int(raw)


def _at_least(environ: Mapping[str, str], name: str, default: int | None, low: int) -> int | None:
    """``name`` as an integer of at least ``low``; ``default`` when unset or empty."""
    value = _int(environ, name, default)
    if value is not None and value < low:
        raise ConfigError(f"environment variable {name}={value} must be >= {low}")
    return value


def _bytes(environ: Mapping[str, str], name: str) -> int | None:
    """``name`` as a byte count: an integer (as the executors write it) or a size with a unit,
    as :func:`~danlu.core.units.parse_bytes` reads a job spec's (``8GB``, ``8GiB``,
    ``512MiB``); None when unset or empty. The integer is written as :data:`_INTEGER` says
    (``int()`` also took ``8_000_000_000``, another script's digits and a count of hundreds
    of digits, which failed later with a bare ``OverflowError`` as the CUDA memory fraction
    was worked out); anything else is read as a size, within its limit."""
    raw = _stripped(environ, name)
    if raw is None:
        return None
    if _INTEGER.fullmatch(raw):
        return int(raw)
    try:
        return parse_bytes(raw, name)
    except SpecError as exc:
        raise ConfigError(f"environment variable {name}={raw!r}: {exc.message}") from None


def _context_bytes(environ: Mapping[str, str]) -> int | None:
    """``DANLU_GPU_CONTEXT_BYTES`` as a byte count (:func:`_bytes`), 0 or more; None when
    unset or empty. A negative count is a :class:`ConfigError` naming the variable."""
    value = _bytes(environ, "DANLU_GPU_CONTEXT_BYTES")
    if value is not None and value < 0:
        raise ConfigError(
            f"environment variable DANLU_GPU_CONTEXT_BYTES={value} must be a byte count of 0 "
            "or more (the CUDA context the control plane allowed for); unset it to use the "
            "built-in GPU table's figure"
        )
    return value


def _name(environ: Mapping[str, str], name: str) -> str | None:
    """A name or path (or a JSON text) without surrounding whitespace (:func:`_stripped`):
    None when unset or empty; only whitespace is refused (a typo in a launcher's template,
    not a name)."""
    raw = environ.get(name)
    if raw is None or raw == "":
        return None
    value = _stripped(environ, name)
    if value is None:
        raise ConfigError(
            f"environment variable {name}={raw!r} is only whitespace; unset it or give a value"
        )
    return value


def _token(environ: Mapping[str, str]) -> str | None:
    """``DANLU_TOKEN`` without surrounding whitespace; None when unset or blank, as the CLI
    reads it. A token read from a file kept its line ending (``\\r`` survives ``$(cat f)``),
    and every metrics POST then failed in ``http.client`` ("Invalid header value"): no
    metric ever arrived. A token with whitespace, a control or a non-ASCII character inside
    is refused, without showing it (it is a secret)."""
    token = _stripped(environ, "DANLU_TOKEN")
    if token is None:
        return None
    if any(c.isspace() or not (c.isascii() and c.isprintable()) for c in token):
        raise ConfigError(
            "environment variable DANLU_TOKEN holds whitespace, a control or a non-ASCII "
            "character inside the token, which cannot be sent as an HTTP header; set it to "
            "the token alone"
        )
    return token


def _job_id(environ: Mapping[str, str]) -> str | None:
    """``DANLU_JOB_ID`` without surrounding whitespace (no job id the API issues has any:
    a ``\\r`` from a file or a blank from a launcher's template became ``%0D`` or ``%20``
    in the metrics URL, and every POST went to a job that does not exist, its records
    lost); a name, and a path segment of the metrics URL, so ``.`` and ``..`` (which a
    proxy resolves to another endpoint) are refused; other characters are percent-encoded
    by :attr:`JobEnv.metrics_url`."""
    job_id = _name(environ, "DANLU_JOB_ID")
    if job_id in (".", ".."):
        raise ConfigError(
            f"environment variable DANLU_JOB_ID={job_id!r} is not a job id; unset it or give "
            "the job's id"
        )
    return job_id


def _api_url(environ: Mapping[str, str]) -> str | None:
    """``DANLU_API_URL`` without a trailing slash; refused unless ``http(s)://host...``
    (``127.0.0.1:8000`` without a scheme failed every metrics POST), and refused with a
    query, a fragment or a user name or password (see below)."""
    url = _name(environ, "DANLU_API_URL")
    if url is None:
        return None
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ConfigError(f"DANLU_API_URL={url!r} is not a URL ({exc})") from None
    if parts.username is not None or parts.password is not None:
        # not shown: the part before the "@" may be a password
        raise ConfigError(
            "DANLU_API_URL holds a user name or password before its host, which no metrics "
            "POST sends (the job authenticates with DANLU_TOKEN); set it to the URL without "
            "them, such as http://127.0.0.1:8000"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"DANLU_API_URL={url!r} must be an http:// or https:// URL with a host, such as "
            "http://127.0.0.1:8000"
        )
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        # the metrics path is appended to the URL: after a "?" it was part of the query (the
        # POST went to the base path) and after a "#" it was dropped, and every request was
        # refused by whatever answered there, its records dropped
        raise ConfigError(
            f"DANLU_API_URL={url!r} holds a query or fragment ('?' or '#'); the metrics path "
            "is appended to it, so it must end with its host, port or path prefix, such as "
            "http://127.0.0.1:8000"
        )
    return url.rstrip("/")


def _slurm_end_time(environ: Mapping[str, str]) -> float | None:
    """``SLURM_JOB_END_TIME`` (POSIX seconds) when it is digits; None otherwise: Slurm sets it,
    and a value it sets otherwise (a future release's) must not fail the job's start, as a
    malformed danlu variable does, for what only names the cause of a stop in the log."""
    raw = _stripped(environ, "SLURM_JOB_END_TIME")
    if raw is None or not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        return None
    return float(raw)


def _precision(environ: Mapping[str, str]) -> Precision | None:
    """``DANLU_PRECISION`` as the estimator names it (``fp32``, ``fp16`` or ``bf16``); None
    when unset or empty. Another value is a :class:`ConfigError` naming the variable."""
    raw = _stripped(environ, "DANLU_PRECISION")
    if raw is None:
        return None
    try:
        return precision_name(raw, "DANLU_PRECISION")
    except SpecError:
        raise ConfigError(
            f"environment variable DANLU_PRECISION={raw[:40]!r} is not a precision: use fp32, "
            "fp16 or bf16 (in any case; 32 and 16 also), or unset it"
        ) from None


def _hparams(environ: Mapping[str, str]) -> dict[str, Any]:
    raw = _name(environ, "DANLU_HPARAMS")
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        raise ConfigError(f"DANLU_HPARAMS={raw[:80]!r} is not JSON") from None
    except RecursionError:  # nested deeper than the decoder goes: it was a bare error
        raise ConfigError(
            f"DANLU_HPARAMS={raw[:80]!r} is nested too deeply; give a JSON object of "
            "hyper-parameters"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"DANLU_HPARAMS must be a JSON object, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class JobEnv:
    """Everything the job learns from its environment, read once.

    Build it with :meth:`from_environ` (``JobEnv.from_environ(os.environ)``); tests pass a dict.
    """

    job_id: str | None = None
    api_url: str | None = None
    token: str | None = None
    checkpoint_dir: str | None = None
    gpu_memory_limit: int | None = None
    gpu_context_bytes: int | None = None
    """The CUDA context the control plane allowed for on this job's GPU type
    (``DANLU_GPU_CONTEXT_BYTES``); None: not told (a job run outside danlu, or by a control
    plane that does not tell it), the built-in GPU table's figure then."""
    batch_size: int | None = None
    global_batch_size: int | None = None
    restart_count: int = 0
    metrics_file: str | None = None
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    elastic_restart_count: int = 0
    elastic_run_id: str | None = None
    hparams: Mapping[str, Any] = field(default_factory=dict)
    """A sweep trial's hyper-parameters (``DANLU_HPARAMS``): ``lr = env.hparams.get("lr",
    0.1)`` keeps the script's default outside a sweep."""
    sweep_id: str | None = None
    trial: int | None = None
    array_index: int | None = None
    """A job array task's index (``DANLU_ARRAY_INDEX``); None outside an array."""
    precision: Precision | None = None
    """The job spec's ``training.precision`` (``DANLU_PRECISION``), ``init``'s default
    precision; None when the launch names none (``fp32`` then)."""
    slurm_job_end_time: float | None = None
    """When Slurm's time limit ends the job (``SLURM_JOB_END_TIME``, POSIX seconds); None off
    Slurm, or without a limit Slurm told."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> JobEnv:
        """Read the job environment from ``environ`` (default: ``os.environ``).

        Raises :class:`~danlu.core.errors.ConfigError` for a malformed or impossible value,
        naming it: not an integer; ``WORLD_SIZE`` or ``LOCAL_WORLD_SIZE`` below 1; ``RANK``
        / ``LOCAL_RANK`` outside them (``LOCAL_RANK`` negative, when ``LOCAL_WORLD_SIZE`` is
        unset); a ``MASTER_PORT`` outside 1-65535; a negative restart
        count, ``DANLU_TRIAL`` or ``DANLU_ARRAY_INDEX``; a ``DANLU_GPU_MEMORY_LIMIT`` that is
        not a positive byte size, or a ``DANLU_GPU_CONTEXT_BYTES`` that is not one of 0 or
        more; a ``DANLU_API_URL`` that is not an ``http(s)://`` URL with
        a host, or that holds a query, a fragment, a user name or a password; a
        ``DANLU_API_URL``, ``DANLU_JOB_ID``, ``DANLU_CHECKPOINT_DIR`` or
        ``DANLU_METRICS_FILE`` (or another name: ``DANLU_SWEEP_ID``, ``MASTER_ADDR``,
        ``TORCHELASTIC_RUN_ID``, ``DANLU_HPARAMS``) of only whitespace; a ``DANLU_JOB_ID`` of
        ``.`` or ``..``; a ``DANLU_TOKEN`` with whitespace, a control or a non-ASCII character
        inside; a ``DANLU_HPARAMS`` that is no JSON object (or nested too deeply to decode); a
        ``DANLU_PRECISION`` that is not a precision. Whitespace around every value is
        stripped (a ``\\r`` from an env file edited on Windows named a directory
        ``ckpt\\r``). An unset (or empty) variable takes its default, as does a number, a
        precision or a token of only whitespace.
        """
        env = os.environ if environ is None else environ
        world = _at_least(env, "WORLD_SIZE", 1, 1) or 1
        rank = _int(env, "RANK", 0) or 0
        if not 0 <= rank < world:
            raise ConfigError(f"RANK={rank} is not within WORLD_SIZE={world}")
        local_world = _at_least(env, "LOCAL_WORLD_SIZE", 1, 1) or 1
        local_rank = _int(env, "LOCAL_RANK", 0) or 0
        # LOCAL_RANK is checked against LOCAL_WORLD_SIZE only when that is set (a launcher
        # other than torchrun may set LOCAL_RANK alone: its default of 1 says nothing)
        local_set = (env.get("LOCAL_WORLD_SIZE") or "").strip() != ""
        if local_rank < 0 or (local_set and local_rank >= local_world):
            raise ConfigError(
                f"LOCAL_RANK={local_rank} is not within LOCAL_WORLD_SIZE={local_world}"
            )
        port = _int(env, "MASTER_PORT", None)
        if port is not None and not 1 <= port <= 65535:
            raise ConfigError(f"MASTER_PORT={port} is not a TCP port (1-65535)")
        limit = _bytes(env, "DANLU_GPU_MEMORY_LIMIT")
        if limit is not None and limit <= 0:
            raise ConfigError(f"DANLU_GPU_MEMORY_LIMIT={limit} must be a positive byte count")
        batch = _int(env, "DANLU_BATCH_SIZE", None)
        if batch is not None and batch <= 0:
            raise ConfigError(f"DANLU_BATCH_SIZE={batch} must be positive")
        global_batch = _int(env, "DANLU_GLOBAL_BATCH_SIZE", None)
        if global_batch is not None and global_batch <= 0:
            raise ConfigError(f"DANLU_GLOBAL_BATCH_SIZE={global_batch} must be positive")
        return cls(
            hparams=_hparams(env),
            sweep_id=_name(env, "DANLU_SWEEP_ID"),
            trial=_at_least(env, "DANLU_TRIAL", None, 0),
            array_index=_at_least(env, "DANLU_ARRAY_INDEX", None, 0),
            precision=_precision(env),
            slurm_job_end_time=_slurm_end_time(env),
            job_id=_job_id(env),
            api_url=_api_url(env),
            token=_token(env),
            checkpoint_dir=_name(env, "DANLU_CHECKPOINT_DIR"),
            gpu_memory_limit=limit,
            gpu_context_bytes=_context_bytes(env),
            batch_size=batch,
            global_batch_size=global_batch,
            restart_count=_at_least(env, "DANLU_RESTART_COUNT", 0, 0) or 0,
            metrics_file=_name(env, "DANLU_METRICS_FILE"),
            rank=rank,
            local_rank=local_rank,
            world_size=world,
            local_world_size=local_world,
            master_addr=_name(env, "MASTER_ADDR"),
            master_port=port,
            elastic_restart_count=_at_least(env, "TORCHELASTIC_RESTART_COUNT", 0, 0) or 0,
            elastic_run_id=_name(env, "TORCHELASTIC_RUN_ID"),
        )

    @property
    def distributed(self) -> bool:
        """True when launched as one of several workers (torchrun with WORLD_SIZE > 1)."""
        return self.world_size > 1

    @property
    def on_cluster(self) -> bool:
        """True when danlu started this job (it has a job id)."""
        return self.job_id is not None

    @property
    def metrics_url(self) -> str | None:
        """Where metrics are POSTed, or None when they go to a file instead."""
        if self.api_url and self.job_id:
            # one path segment whatever the id holds: a "/", "?" or "#" in it sent the
            # records to another endpoint
            job = urllib.parse.quote(self.job_id, safe="")
            return f"{self.api_url}/api/v1/jobs/{job}/metrics"
        return None

    @property
    def stopping_url(self) -> str | None:
        """Where the run asks why it is being stopped (``GET``, with its token:
        :mod:`danlu.train.stop_cause`), or None without an API."""
        metrics = self.metrics_url
        return metrics[: -len("/metrics")] + "/stopping" if metrics is not None else None

    @property
    def is_chief(self) -> bool:
        """Rank 0: the worker that reports metrics and writes shared files."""
        return self.rank == 0
