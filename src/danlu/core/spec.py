"""The job spec: what a user submits (YAML or JSON), validated with pydantic.

Minimal form::

    name: hello
    command: [python, -c, "print('hello')"]
    resources: {gpus: 1, gpu_memory: 20GiB}
    priority: 0

Every field has a default or is required with a clear message; :func:`load_spec` turns
pydantic's errors into one :class:`~danlu.core.errors.SpecError` naming the field and the fix
(:mod:`danlu.core.spec_errors`, re-exported here).
"""

from __future__ import annotations

import datetime
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from danlu.core.errors import SpecError
from danlu.core.file_url import lower_file_scheme
from danlu.core.spec_errors import NAME_RULE as NAME_RULE
from danlu.core.spec_errors import NULL_MESSAGE as _NULL
from danlu.core.spec_errors import NULL_VALUE as _NULL_VALUE
from danlu.core.spec_errors import name_error as name_error
from danlu.core.spec_errors import spec_error as spec_error
from danlu.core.spec_errors import valid_name as valid_name
from danlu.core.spec_file import MAX_SPEC_FILE as MAX_SPEC_FILE
from danlu.core.spec_file import load_spec_data as load_spec_data
from danlu.core.spec_file import read_spec_text as read_spec_text
from danlu.core.spec_file import refuse_named_pipe as refuse_named_pipe
from danlu.core.spec_file import spec_file_data as spec_file_data
from danlu.core.spec_hints import choice_hint
from danlu.core.spec_limits import FILE_URL as FILE_URL
from danlu.core.spec_limits import MAX_BATCH as MAX_BATCH
from danlu.core.spec_limits import MAX_CPUS as MAX_CPUS
from danlu.core.spec_limits import MAX_DURATION as MAX_DURATION
from danlu.core.spec_limits import MAX_EXEC_STRING as MAX_EXEC_STRING
from danlu.core.spec_limits import MAX_EXEC_TOTAL as MAX_EXEC_TOTAL
from danlu.core.spec_limits import MAX_GPUS as MAX_GPUS
from danlu.core.spec_limits import MAX_PATH as MAX_PATH
from danlu.core.spec_limits import MAX_PREEMPT_GRACE as MAX_PREEMPT_GRACE
from danlu.core.spec_limits import MAX_PRIORITY as MAX_PRIORITY
from danlu.core.spec_limits import MAX_RESTARTS as MAX_RESTARTS
from danlu.core.spec_limits import SPEC_LIMITS as SPEC_LIMITS
from danlu.core.spec_limits import check_limits as check_limits
from danlu.core.spec_limits import file_url_path as file_url_path
from danlu.core.spec_limits import is_checkpoint_location as is_checkpoint_location
from danlu.core.spec_limits import tilde_note
from danlu.core.spec_text import given_words, parse_text, written_text
from danlu.core.spec_training import AUTO_FAMILY as AUTO_FAMILY
from danlu.core.spec_training import DEFAULT_OPTIMIZER, Precision, optimizer_name, precision_name
from danlu.core.units import parse_bytes, parse_duration
from danlu.core.values import MAX_INT, check_values, quoted, range_message

MODEL_FAMILIES = ("cnn-small", "cnn-large", "transformer", "lstm", "recommendation", "gan", "rl")
"""The model families the GPU-sharing interference model knows (``training.family``): the
kinds of model whose co-location was measured (Gavel's ResNet-18, ResNet-50, Transformer,
LSTM language model, recommendation, CycleGAN and A3C jobs)."""

_RANGE = re.compile(r"^\s*([0-9]+)\s*\.\.\s*([0-9]+)\s*$")
_GPUS_HELP = "write 2 or an elastic range '1..8'"
NO_GPUS = "danlu schedules GPU jobs: ask for 1 GPU or more"
"""Why a GPU count below 1 is refused (by the spec, and by the control plane's admission)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _within(path: str) -> Any:
    """A before-validator refusing an integer beyond 2**62 with the range of the field at
    ``path`` in :data:`SPEC_LIMITS` (a booleans too, as :func:`no_boolean`): pydantic takes
    any integer, and the store's generic bound came first. A smaller integer out of range is
    refused by :func:`check_limits`, which a stored spec skips.

    A float beyond 2**62 (``priority: 1e20``) is refused so too: pydantic said only "Unable
    to parse input string as an integer, exceeded maximum size" of one past 64 bits."""

    def check(value: Any) -> Any:
        no_boolean(value)
        return beyond_store(value, SPEC_LIMITS[path])

    return check


def beyond_store(value: Any, limits: tuple[float, float]) -> Any:
    """``value``, unless it is a number (an integer, or a finite float) beyond 2**62: then
    a ``ValueError`` saying the field's range, ``limits``, for a validator to raise."""
    big = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if big and abs(value) > MAX_INT:
        raise ValueError(range_message(*limits, value))
    return value


def no_boolean(value: Any) -> Any:
    """Refuse a boolean where a number goes: pydantic reads ``true`` as 1, and YAML reads
    ``yes``, ``no``, ``on`` and ``off`` as booleans (``priority: yes`` was priority 1)."""
    if isinstance(value, bool):
        raise ValueError(
            f"expected a number, got a boolean ({str(value).lower()}; YAML reads yes, no, on "
            "and off as booleans too); write a number"
        )
    return value


_TRUE_TEXT = frozenset({"true", "yes", "on", "t", "y", "1"})
_FALSE_TEXT = frozenset({"false", "no", "off", "f", "n", "0"})
"""Text a boolean field takes as true or false: YAML's and pydantic's words, and 1 and 0."""


def true_or_false(value: Any) -> Any:
    """The one rule of every boolean field of a spec (``shell``, ``preemptible``,
    ``training.activation_checkpointing``, a sweep's ``array``), a before-validator: a
    boolean; the number 1 or 0; or text, in any case and with blanks around it, of
    :data:`_TRUE_TEXT` or :data:`_FALSE_TEXT` (``yes``, ``Off``, ``'1'``). Anything else is
    left to pydantic's boolean check, whose error :func:`spec_error` says in the spec's
    words (``'maybe' is not true or false: write true or false``; null as every field's
    null). ``activation_checkpointing`` refused the 1 and 0 the others took; the others
    refused blanks around the text it took."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return value == 1
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE_TEXT or text in _FALSE_TEXT:
            return text in _TRUE_TEXT
    return value


def _optional_duration(value: Any) -> Any:
    """A before-validator reading a duration (``2h``, ``90m``, ``04:00:00``) as its seconds:
    :func:`~danlu.core.units.parse_duration`, which refuses a boolean; text it reads as NaN
    or an infinity (``nan``, ``inf``) is refused as :func:`finite_number` refuses it, and a
    date YAML read (``deadline: 2026-12-31``) saying that a duration goes there."""
    if value is None:
        return None
    if isinstance(value, datetime.date):  # deadline: 2026-12-31, the day meant
        raise ValueError(
            f"{value} was read as a date, not a duration: write how long, e.g. 3d, 72h or "
            "3-00:00:00 (a deadline counts from submission)"
        )
    seconds = parse_duration(value, "")
    if isinstance(value, str):
        check_finite(seconds)
    return seconds


def finite_number(value: Any) -> Any:
    """A before-validator for a float field: ``value``, unless it is a boolean
    (:func:`no_boolean`) or text that reads as a number that is not finite (``nan``,
    ``inf``, ``-Infinity``, ``1e999``): then "must be a finite number", as
    :func:`~danlu.core.values.check_values` and :func:`check_limits` say of a NaN or an
    infinity given as a number. pydantic read such text as the float, which then failed the
    field's range in pydantic's words (``cpus: nan``: "Input should be greater than or equal
    to 0"); no version accepted it. A number is left to those checks: a stored spec that an
    older version accepted with one (``deadline: .inf``) is read as it was. Text that is no
    number is left to pydantic."""
    no_boolean(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        check_finite(number)
    return value


def check_finite(number: float) -> None:
    """Raise the ``ValueError`` of :func:`finite_number` for a NaN or an infinity (the one
    message of every pydantic check of a finite number: specs and sweeps)."""
    if not math.isfinite(number):
        raise ValueError(f"must be a finite number (got {number})")


def _finite_within(path: str) -> Any:
    """:func:`_within` for the float field at ``path``, after :func:`finite_number`."""
    within = _within(path)

    def check(value: Any) -> Any:
        return within(finite_number(value))

    return check


def not_read_as_text(value: Any, info: ValidationInfo) -> Any:
    """Refuse a number, boolean or date where text goes, saying to quote it: YAML reads
    ``name: 2024`` as a number, ``user: yes`` as a boolean and ``workdir: 2024-01-01`` as a
    date, and pydantic then said only that a string was expected."""
    return _refuse_non_text(value, f"{info.field_name}: ")


def _text_item(value: Any) -> Any:
    """:func:`not_read_as_text` for an item of a list or a value of a mapping
    (``command: [train.py, --lr, 0.1]``, ``env: {SEED: 1}``): the error's path names the
    item (``command.2``, ``env.SEED``), the message shows it quoted. A null (``env: {A: }``,
    ``env: {A: null}``), a list or a mapping is refused saying to write one string
    (pydantic said only "Input should be a valid string")."""
    if value is None:
        raise ValueError(
            "is null (YAML reads an empty value, ~ and null so), not text: write a string, "
            "quoted: '' for an empty one, 'null' for the word"
        )
    if isinstance(value, list | dict):
        kind = "list" if isinstance(value, list) else "mapping"
        raise ValueError(f"is a {kind}, not text: write one string (quote it)")
    return _refuse_non_text(value, "")


def _refuse_non_text(value: Any, key: str) -> Any:
    """``value``, unless YAML read it as a boolean, a number or a date: then a message
    saying to quote it, shown as ``{key}'text'``."""
    if isinstance(value, bool):
        raise ValueError(
            "was read as a boolean (YAML reads unquoted yes, no, on, off, true and false so): "
            f"quote the text, e.g. {key}'yes'"
        )
    if isinstance(value, int | float | datetime.date):
        kind = "date" if isinstance(value, datetime.date) else "number"
        shown = written_text(value)  # 010, not 10: the text to quote is the text written
        raise ValueError(f"{shown} was read as a {kind}, not text: quote it, {key}'{shown}'")
    return value


TextItem = Annotated[str, BeforeValidator(_text_item)]
"""A string item of a list or value of a mapping, refusing what YAML read as a number,
boolean or date with :func:`_text_item`'s message (pydantic's was only "Input should be a
valid string")."""


def _size(value: Any) -> Any:
    """A before-validator reading a byte size (:func:`~danlu.core.units.parse_bytes`),
    refusing a number without a unit that has a fraction (``gpu_memory: 0.5`` was 0 bytes:
    the whole GPU): a number without a unit is bytes. A whole size below 1 MiB is refused
    by :func:`check_limits` (a stored spec keeps what it was accepted with)."""
    size = parse_bytes(value, "")  # first: what is no size, or too large, says so
    fraction = ""
    if isinstance(value, float) and not value.is_integer():
        fraction = str(value)
    elif isinstance(value, str) and (bare := _BARE_FRACTION.match(value)):
        fraction = bare.group(1) if bare.group(2).strip("0") else ""
    if fraction:
        raise SpecError(
            "",
            f"{fraction} bytes is a fraction of a byte (a number without a unit is bytes): "
            f"give the size a unit, e.g. {fraction}GiB",
        )
    return size


_BARE_FRACTION = re.compile(r"^\s*([0-9]+\.([0-9]+))\s*\Z")
"""A number with decimals and no unit (``0.5``): its digits, and those after the point."""


class GpuCount(_Strict):
    """GPUs a job needs: a fixed count (``min == max``) or an elastic range ``min..max``."""

    min: int
    max: int

    _min = field_validator("min", mode="before")(_within("resources.gpus.min"))
    _max = field_validator("max", mode="before")(_within("resources.gpus.max"))

    @model_validator(mode="after")
    def _ordered(self) -> GpuCount:
        if self.min < 1:  # the admission's words (check_spec_shape), refused here locally
            shown = f"{self.min}..{self.max}" if self.max != self.min else str(self.min)
            raise ValueError(f"{NO_GPUS} (got {shown})")
        if self.max < self.min:
            raise ValueError(f"elastic range {self.min}..{self.max} has max below min")
        return self

    @property
    def elastic(self) -> bool:
        return self.max > self.min


class Resources(_Strict):
    """Per-job resources. ``gpu_memory`` is bytes per GPU, ``"auto"`` (estimated) or unset."""

    gpus: GpuCount = GpuCount(min=1, max=1)
    gpu_memory: int | Literal["auto"] | None = None
    gpu_fraction: float | None = Field(default=None, gt=0, le=1)
    gpu_type: list[TextItem] = Field(default_factory=list)
    cpus: float = Field(default=1.0, ge=0)
    memory: int = 0

    _fraction = field_validator("gpu_fraction", mode="before")(finite_number)
    _cpus = field_validator("cpus", mode="before")(_finite_within("resources.cpus"))

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("expected a GPU count such as 2, or an elastic range such as '1..8'")
        if isinstance(value, int):
            _within("resources.gpus")(value)
            return {"min": value, "max": value}
        if isinstance(value, str):
            # ASCII digits only: "²" is a digit to str.isdigit() and int() refuses it
            match = _RANGE.match(value)
            text = value.strip()
            parts = match.groups() if match else (text, text) if text.isascii() else ()
            if len(parts) == 2 and all(p.isdecimal() for p in parts):
                if any(len(p.lstrip("0")) > 18 for p in parts):  # no int() of 5000 digits
                    raise ValueError(f"{quoted(value)}: at most {MAX_GPUS:,} GPUs")
                # leading zeros count against int()'s 4,300 digits: dropped first
                low, high = (int(p.lstrip("0") or "0") for p in parts)
                return {"min": low, "max": high}
            raise ValueError(f"{quoted(value)} is not a GPU count; {_GPUS_HELP}")
        if value is None:  # gpus: (left empty)
            raise ValueError(f"{_NULL}{_NULL_VALUE}")
        if not isinstance(value, dict | GpuCount):
            raise ValueError(f"{given_words(value)} is not a GPU count; {_GPUS_HELP}")
        return value

    @field_validator("gpu_memory", mode="before")
    @classmethod
    def _gpu_memory(cls, value: Any) -> Any:
        if value is None or value == "auto":
            return value
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"  # Auto, AUTO: was "not a byte size", which never named auto
        return _size(value)

    _memory = field_validator("memory", mode="before")(_size)

    @field_validator("gpu_type", mode="before")
    @classmethod
    def _gpu_type(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool | int | float | datetime.date):
            not_read_as_text(value, info)  # gpu_type: 3090
        return [value] if isinstance(value, str) else value


class TrainingHints(_Strict):
    """Optional hints that let the scheduler choose batch size and estimate memory."""

    global_batch_size: int | None = Field(default=None, gt=0)
    min_batch_size: int | None = Field(default=None, gt=0)
    max_batch_size: int | None = Field(default=None, gt=0)
    model: str | None = None
    """A model reference ``package.module:factory`` for memory estimation."""
    application: str | None = None
    """A profiled application name (simulator workloads)."""
    family: str | None = None
    """The model's family (one of :data:`MODEL_FAMILIES`), for the interference model that
    decides whether a GPU-sharing job may go beside another job; unset: the median pair;
    ``auto``: inferred at submission from the layers of ``model`` as the memory tracer
    builds it (:mod:`danlu.estimate.family`), unset when none is recognised."""
    expected_duration: float | None = Field(default=None, gt=0)
    """The user's estimate of the run time in seconds, or a duration as ``time_limit``
    takes one (``2h``, ``04:00:00``); used by sjf, value-density and EASY backfill."""
    precision: Precision = "fp32"
    """The precision the job trains in, for the memory estimate of ``model``: ``fp32``,
    ``fp16`` or ``bf16`` (autocast), as ``danlu estimate --precision`` and ``danlu.train``
    take it (any case; ``32`` and ``16`` also), stored as one of the three."""
    optimizer: str = DEFAULT_OPTIMIZER
    """The optimizer the job trains with, for the memory estimate of ``model`` (its state is
    part of the peak): as ``danlu estimate --optimizer`` takes it, a name of
    :data:`~danlu.core.spec_training.OPTIMIZER_PRESETS` or a ``torch.optim`` class name;
    stored lower-cased."""
    activation_checkpointing: bool = False
    """Whether the job recomputes activations in the backward pass (``danlu estimate
    --checkpointing``), for the memory estimate of ``model``: the model must have a
    ``checkpointing`` attribute or ``gradient_checkpointing_enable()``."""

    @field_validator("expected_duration", mode="before")
    @classmethod
    def _expected(cls, value: Any) -> Any:
        return _optional_duration(no_boolean(value))  # as time_limit: 2h, 04:00:00

    _texts = field_validator("model", "application", "family", mode="before")(not_read_as_text)
    _global = field_validator("global_batch_size", mode="before")(
        _within("training.global_batch_size")
    )
    _smallest = field_validator("min_batch_size", mode="before")(_within("training.min_batch_size"))
    _largest = field_validator("max_batch_size", mode="before")(_within("training.max_batch_size"))

    @field_validator("precision", mode="before")
    @classmethod
    def _precision(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value in (16, 32):
            value = str(value)  # YAML reads precision: 16 as a number
        return precision_name(value, "")

    _checkpointing = field_validator("activation_checkpointing", mode="before")(true_or_false)

    @field_validator("optimizer", mode="before")
    @classmethod
    def _optimizer(cls, value: Any, info: ValidationInfo) -> Any:
        return optimizer_name(not_read_as_text(value, info), "")

    @field_validator("family")
    @classmethod
    def _family(cls, value: str | None) -> str | None:
        """A family in any case, blanks around it dropped, stored as
        :data:`MODEL_FAMILIES` and :data:`AUTO_FAMILY` write it (``Transformer`` and
        ``Auto`` were refused, while ``precision``, ``optimizer`` and ``gpu_memory: Auto``
        take any case); a name of none says the one meant where it is spelt nearly so."""
        if value is None:
            return None
        name = value.strip().lower()
        if name == AUTO_FAMILY or name in MODEL_FAMILIES:
            return name
        meant = choice_hint(value, [*MODEL_FAMILIES, AUTO_FAMILY])
        raise ValueError(
            f"unknown model family {value!r}"
            + (f" (did you mean {meant}?)" if meant is not None else "")
            + f"; use one of {', '.join(MODEL_FAMILIES)}, "
            f"{AUTO_FAMILY!r} (inferred from training.model), or leave it out"
        )


MAX_DEPENDENCIES = 100
"""The most jobs one job may depend on."""
_JOB_REF = re.compile(r"^[0-9a-f]{4,32}\Z")
_JOB_FIX = (
    "give the id `danlu submit` printed (12 hex digits), or 4 or more of its first characters"
)
"""How a dependency's job is named, as its error says it."""


class Dependency(_Strict):
    """A job this job waits for: it is not scheduled before the job named by ``job`` (an id,
    or a unique prefix of 4 or more of its characters, stored as the full id) meets
    ``condition``, and is cancelled once it never can. A plain string is the id with
    ``condition: succeeded``."""

    job: str
    condition: Literal["succeeded", "failed", "finished", "started"] = "succeeded"
    """When it is met, after Slurm's ``afterok``, ``afternotok``, ``afterany`` and ``after``:
    the job ``succeeded``; ``failed`` (ended FAILED or CANCELLED); ``finished`` (ended in any
    state); ``started`` (ran, or is running)."""

    @field_validator("job", mode="before")
    @classmethod
    def _job_number(cls, value: Any) -> Any:
        """Refuse what YAML read as no text, saying what a job id is: a number (to quote), a
        boolean (``depends_on: [yes]``), a list or a mapping (``depends_on: [[3f2a]]``), of
        which pydantic said only "Input should be a valid string"."""
        if isinstance(value, bool):
            raise ValueError(
                f"{str(value).lower()} was read as a boolean, not a job id: {_JOB_FIX}"
            )
        if isinstance(value, int | float):
            raise ValueError(
                f"{written_text(value)} was read as a number: quote a job id of digits only, "
                "e.g. '012345678901' (YAML reads it as a number otherwise)"
            )
        if isinstance(value, list | dict):
            kind = "list" if isinstance(value, list) else "mapping"
            raise ValueError(f"{quoted(value)} is a {kind}, not a job id: {_JOB_FIX}")
        return value

    @field_validator("job")
    @classmethod
    def _job(cls, value: str) -> str:
        job, colon, condition = value.partition(":")
        conditions = get_args(cls.model_fields["condition"].annotation)
        if colon and _JOB_REF.match(job.strip()) and condition.strip() in conditions:
            # --after's ID:CONDITION, written in a spec
            raise ValueError(
                f"{quoted(value)} is not a job id: write the condition apart, "
                f"{{job: {job.strip()}, condition: {condition.strip()}}}"
            )
        if not _JOB_REF.match(value):
            meant = value.strip().lower()  # ABCD1234, ' 3f2a': hex digits, said to be none
            fix = f"write {meant} (lower case, no blanks)" if _JOB_REF.match(meant) else _JOB_FIX
            raise ValueError(f"{quoted(value)} is not a job id: {fix}")
        return value


class JobSpec(_Strict):
    """A training job as submitted."""

    name: str
    shell: bool = False
    """Run ``command[0]`` through ``/bin/sh -c``. Off by default: commands are argv lists.
    Declared before ``command`` so that the command's validator can see it."""
    command: list[TextItem] = Field(default_factory=list, validate_default=True)
    project: str = "default"
    user: str = "default"
    priority: int = 0
    env: dict[str, TextItem] = Field(default_factory=dict)
    resources: Resources = Resources()
    training: TrainingHints = TrainingHints()
    preemptible: bool = True
    max_restarts: int = Field(default=3, ge=0)
    workdir: str | None = None
    """The directory the command starts in: an absolute path on the node that runs it (as
    Slurm's ``--chdir``). Unset, where the executor starts jobs: the control plane's
    directory, or with ``DANLU_RUN_AS=user`` the account's home. A job run as its user's
    account enters it as that account."""
    checkpoint_dir: str | None = None
    """Where the job's checkpoints go (``DANLU_CHECKPOINT_DIR``): an absolute path or a URL
    (``s3://bucket/prefix``); the job writes there, danlu itself never touches it. Unset, the
    control plane gives each job a directory of its own under its home."""
    deadline: float | None = Field(default=None, gt=0)
    """Seconds after submission by which the job must finish: the control plane cancels a
    job not finished by then (a running one is stopped with SIGTERM and its
    ``preempt_grace`` to checkpoint, then SIGKILL). A duration such as
    ``6h`` or ``1-00:00:00`` is read as its seconds."""
    time_limit: float | None = Field(default=None, gt=0)
    """Seconds the job may hold GPUs in all, over every run (restarts, preemptions and
    resizes count the time each run held its GPUs; the time queued does not): once reached,
    the control plane stops it (SIGTERM, its ``preempt_grace`` to checkpoint) and it ends
    CANCELLED, like Slurm's ``--time``. A duration such as ``2h``, ``90m`` or ``04:00:00``."""
    preempt_grace: float | None = Field(default=None, gt=0, le=MAX_PREEMPT_GRACE)
    """Seconds the job has, after SIGTERM, to checkpoint and exit when it is preempted, moved
    to other GPUs, its node drained, or stopped at its ``deadline`` or ``time_limit``,
    before SIGKILL (as Kubernetes'
    ``terminationGracePeriodSeconds``): a large model's checkpoint may take minutes. A
    duration such as ``5m``; unset, the control plane's (``DANLU_PREEMPT_GRACE``, 30 s)."""
    depends_on: list[Dependency] = Field(default_factory=list, max_length=MAX_DEPENDENCIES)
    """Jobs this one waits for (:class:`Dependency`): a pipeline's steps, each submitted
    with the ids of the steps before it."""

    _priority = field_validator("priority", mode="before")(_within("priority"))
    _booleans = field_validator("shell", "preemptible", mode="before")(true_or_false)
    _restarts = field_validator("max_restarts", mode="before")(_within("max_restarts"))
    _durations = field_validator("deadline", "time_limit", "preempt_grace", mode="before")(
        _optional_duration
    )
    _texts = field_validator("name", "project", "user", "workdir", "checkpoint_dir", mode="before")(
        not_read_as_text
    )

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith("/"):
            raise ValueError(
                f"{quoted(value)} is not an absolute path{tilde_note(value)}; write one, e.g. "
                "/data/runs"
            )
        if len(value.encode()) > MAX_PATH:
            raise ValueError(f"a path is at most {MAX_PATH} bytes (Linux's PATH_MAX)")
        return value

    @field_validator("checkpoint_dir")
    @classmethod
    def _file_scheme(cls, value: str | None) -> str | None:
        """A ``file://`` URL with its scheme in lower case (``FILE:///shared/ckpt`` is
        ``file:///shared/ckpt``; a URL's scheme is case-insensitive): what reads the URL
        (the refusal of a relative one, the retention's and the job's tell of a local
        directory) compares ``file://`` as written, so ``FILE://ckpt`` passed as a remote URL
        of a relative path, and the retention took ``FILE:///...`` for one it may delete
        under. A stored spec is read so too: the same directory. Nothing else changes (its
        ``%`` escapes are decoded where it is read: :mod:`danlu.core.file_url`)."""
        return None if value is None else lower_file_scheme(value)

    @field_validator("env", mode="before")
    @classmethod
    def _env_names(cls, value: Any) -> Any:
        """Refuse a variable name YAML read as a number, boolean or date (``env: {1: x}``),
        saying to quote it: pydantic said "Input should be a valid string" at env.1.[key].
        An ``env`` that is no mapping (``env: null``, ``env: [A=1]``) says what to write."""
        if not isinstance(value, dict):
            raise ValueError(
                f"{given_words(value)} is not a mapping of variable "
                "names to text: write env: {SEED: '1'}, or leave env out for none"
            )
        for key in value:
            _refuse_non_text(key, "")
        return value

    @field_validator("depends_on", mode="before")
    @classmethod
    def _depends_on(cls, value: Any) -> Any:
        if isinstance(value, str | int | float | dict):  # one job
            value = [value]
        if isinstance(value, list):
            return [
                item if isinstance(item, dict | Dependency) else {"job": item} for item in value
            ]
        return value

    @field_validator("depends_on")
    @classmethod
    def _each_dependency_once(cls, value: list[Dependency]) -> list[Dependency]:
        """The entries, each job with each condition once, in their first places: one
        written twice alike (``depends_on: [3f2a, 3f2a]``) waits for nothing more. Kept,
        not refused: a sweep's stored trial names its jobs by full id, so two prefixes of one
        job written in it are one entry twice there, and its later trials are read as new
        specs (refusing would stop the sweep). A job named with two conditions stays twice
        (the control plane refuses ``succeeded`` with ``failed``)."""
        seen: set[tuple[str, str]] = set()
        unique: list[Dependency] = []
        for dependency in value:
            key = (dependency.job, dependency.condition)
            if key not in seen:
                seen.add(key)
                unique.append(dependency)
        return unique

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not valid_name(value):
            raise ValueError(name_error(value))
        return value

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(
                "write the command as an argv list, e.g. [python, train.py, --lr, '0.1']; "
                "a shell string runs only with shell: true and command: ['the string']"
            )
        return value

    @field_validator("command")
    @classmethod
    def _shell(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if info.data.get("shell") and len(value) != 1:
            raise ValueError(
                "with shell: true, command must hold exactly one string, e.g. ['make && ./run']"
            )
        return value


def _text_fields(model: type[BaseModel], prefix: str = "") -> dict[str, bool]:
    """The dotted paths of ``model``'s text fields (``str`` or ``str | None``), each with
    whether it may be null (unset)."""
    fields: dict[str, bool] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields |= _text_fields(annotation, f"{prefix}{name}.")
        elif annotation is str or annotation == str | None:
            fields[prefix + name] = annotation is not str
    return fields


TEXT_FIELDS: dict[str, bool] = _text_fields(JobSpec)
"""A job spec's text fields by dotted path (``name``, ``workdir``, ``training.model``, ...),
each with whether it may be null: ``danlu submit --set name=2024`` gives the text as it is
written, not YAML's number."""


def parse_spec(data: Any, *, stored: bool = False) -> JobSpec:
    """Validate a mapping as a :class:`JobSpec`; errors name the field and the fix.

    A new spec must also keep within what the store and a process launch can take
    (:func:`check_limits`); a ``stored`` one, accepted when it was submitted, is read as it
    was (an older version's bounds may have been looser)."""
    if not isinstance(data, dict):
        raise SpecError("", f"a job spec must be a mapping of fields, got {given_words(data)}")
    if not data:  # an empty file, or one of only comments: "name: this field is required"
        raise SpecError("", f"the job spec is empty (no fields): {_EMPTY_FIX}")
    if not stored:
        check_values(data, limits=SPEC_LIMITS)
    try:
        spec = JobSpec.model_validate(data)
    except SpecError:
        raise
    except ValidationError as exc:
        raise spec_error(exc) from None
    if not stored:
        check_limits(spec)
    return spec


_EMPTY_FIX = (
    "a file of only blank lines or comments is so; write its fields, at least its name and "
    "command, e.g. name: train and command: [python, train.py]"
)
"""What to do about an empty job spec (:func:`parse_spec`)."""


def load_spec(path: str | Path) -> JobSpec:
    """Load a job spec from a YAML or JSON file."""
    return parse_spec(load_spec_data(path))


def loads_spec(text: str, is_json: bool = False) -> JobSpec:
    """Parse a job spec from YAML (a superset of JSON) or JSON text; ``text`` that is not a
    string (None: a bare AttributeError of the YAML reader) is a :class:`SpecError` naming
    it."""
    if not isinstance(text, str):
        raise SpecError("text", f"must be the spec's text, a string (got {quoted(text)})")
    data = parse_text(text, is_json)
    return parse_spec({} if data is None else data)  # empty, as load_spec_data reads it
