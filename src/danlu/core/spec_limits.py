"""The bounds of a job spec's numbers, paths and launch, and the checks of a new spec against
them (:func:`check_limits`): what the store, the scheduler and a process launch can take.
:func:`~danlu.core.spec.parse_spec` runs them on a spec being submitted; a stored spec, accepted
when it was submitted, skips them (an older version's bounds may have been looser)."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from danlu.core.errors import SpecError
from danlu.core.file_url import FILE_SCHEME, FileUrlError, is_file_url, local_file_path
from danlu.core.file_url import FILE_URL as FILE_URL
from danlu.core.file_url import file_url_path as file_url_path
from danlu.core.spec_errors import (
    NAME_RULE,
    USER_NAME_RULE,
    name_error,
    valid_name,
    valid_user_name,
)
from danlu.core.spec_training import AUTO_FAMILY
from danlu.core.units import MAX_BYTES, MiB, format_bytes
from danlu.core.values import control_character, quoted, range_message

if TYPE_CHECKING:
    from danlu.core.spec import JobSpec, Resources, TrainingHints

MAX_GPUS = 1 << 20
"""The most GPUs a job may ask for (far above any cluster; the admission check compares
a fixed count with the cluster)."""
MAX_BATCH = 1 << 30
"""The largest batch size in samples (within the store's 32-bit integers)."""
MAX_DURATION = 100 * 365.25 * 24 * 3600
"""The longest duration a spec may give (100 years, in seconds): a time limit, deadline or
expected duration beyond it is a slip (``1e308``) that every duration shown would spell out."""
MAX_PRIORITY = 1_000_000
"""Priorities lie in ``-MAX_PRIORITY..MAX_PRIORITY`` (as projects' do)."""
MAX_RESTARTS = 1_000_000
MAX_CPUS = 1_000_000
MAX_PREEMPT_GRACE = 3600.0
"""The longest grace a spec may ask for to checkpoint after SIGTERM (an hour)."""
MAX_EXEC_STRING = 128 * 1024
"""Linux's limit on one argument or environment string, its NUL included (MAX_ARG_STRLEN)."""
MAX_EXEC_TOTAL = 1024 * 1024
"""The most bytes a job's command and env may come to (with a pointer each); Linux takes 2 MiB
in all with the default stack limit, and the launch adds its own environment."""


SPEC_LIMITS: dict[str, tuple[float, float]] = {
    "priority": (-MAX_PRIORITY, MAX_PRIORITY),
    "max_restarts": (0, MAX_RESTARTS),
    "resources.gpus": (1, MAX_GPUS),
    "resources.gpus.min": (1, MAX_GPUS),
    "resources.gpus.max": (1, MAX_GPUS),
    "resources.cpus": (0, MAX_CPUS),
    "training.global_batch_size": (1, MAX_BATCH),
    "training.min_batch_size": (1, MAX_BATCH),
    "training.max_batch_size": (1, MAX_BATCH),
    "resources.memory": (0, MAX_BYTES),
    "resources.gpu_memory": (0, MAX_BYTES),
    "training.expected_duration": (0, MAX_DURATION),
    "deadline": (0, MAX_DURATION),
    "time_limit": (0, MAX_DURATION),
}
"""The ranges of a spec's numbers (:func:`check_limits`) by dotted path: an integer beyond
the store's 2**62 gets its field's own range in the message, as one just over it does (a
size or duration too, not the store's ``-2**62..2**62``, which let a size be negative)."""


def check_limits(spec: JobSpec) -> None:
    """Raise :class:`SpecError` for a number the store or the scheduler cannot take
    (PostgreSQL's 32-bit integers and JSON without infinities; sizes within 64 bits), a
    command that can never run (:func:`_check_command`) or an environment variable name no
    process can be given, or a name or path of the spec holding a control character
    (:func:`check_printable`); nor what the control plane's admission refuses of every spec
    whatever its cluster: a ``project``, ``user`` or ``gpu_type`` no project, user or GPU
    type is named (:func:`_check_names`), a ``gpu_fraction`` of several GPUs or
    ``training.family: auto`` without a model (:func:`_check_shape`)."""
    res, training = spec.resources, spec.training
    limited: list[tuple[str, float | None]] = [
        ("priority", spec.priority),
        ("max_restarts", spec.max_restarts),
        ("resources.gpus.min", res.gpus.min),
        ("resources.gpus.max", res.gpus.max),
        ("resources.cpus", res.cpus),
        ("training.global_batch_size", training.global_batch_size),
        ("training.min_batch_size", training.min_batch_size),
        ("training.max_batch_size", training.max_batch_size),
    ]
    limited += [
        ("resources.memory", res.memory),
        ("training.expected_duration", training.expected_duration),
        ("deadline", spec.deadline),
        ("time_limit", spec.time_limit),
    ]
    if isinstance(res.gpu_memory, int):
        limited.append(("resources.gpu_memory", res.gpu_memory))
    for field, value in limited:
        if value is None:
            continue
        low, high = SPEC_LIMITS[field]
        if not math.isfinite(value):
            raise SpecError(field, f"must be a finite number (got {value})")
        if not low <= value <= high:
            raise SpecError(field, range_message(low, high, value))
    _check_sizes(res)
    _check_gpu_types(res)
    _check_shape(spec)
    _check_batch_sizes(training)
    for key in spec.env:
        if not key:
            raise SpecError(
                "env",
                "'' is not an environment variable name (it is empty): name the variable, "
                "e.g. env: {SEED: '1'}",
            )
        if "=" in key:
            name, _, after = key.partition("=")
            raise SpecError(
                "env",
                f"{quoted(key)} is not an environment variable name (it holds '='): write the "
                f"name as the key and the value after it, e.g. env: {{{name or 'NAME'}: "
                f"'{after}'}}",
            )
    _check_command(spec)
    _check_exec_size(spec)
    for field, text in (("project", spec.project), ("user", spec.user)):
        if not text.strip():  # no project or user is named so: the server found none
            raise SpecError(
                field,
                f"{quoted(text)} names no {field}: name one, or leave {field} out for 'default' "
                f"({'the default project' if field == 'project' else 'whoever submits it'})",
            )
        if len(text) > 63:
            raise SpecError(field, f"{quoted(text)} is longer than 63 characters")
    _check_checkpoint_dir(spec.checkpoint_dir)
    check_printable(spec)
    _check_names(spec)  # after: a control character is told as one, not as a naming rule


def _check_shape(spec: JobSpec) -> None:
    """Refuse a ``gpu_fraction`` with more than one GPU (a share of one GPU: the job would
    share each of them) and ``training.family: auto`` without a ``training.model`` to infer
    the family from: the control plane's admission refuses both of every spec. Not for a
    stored spec: one accepted with them is read as it was."""
    res = spec.resources
    if res.gpu_fraction is not None and res.gpus.max > 1:
        gpus = res.gpus
        shown = f"{gpus.min}..{gpus.max}" if gpus.elastic else str(gpus.max)
        raise SpecError(
            "resources.gpu_fraction",
            f"{res.gpu_fraction} is a share of one GPU, and the job asks for {shown} GPUs: use "
            "gpus: 1 with it, or leave gpu_fraction out for whole GPUs",
        )
    if spec.training.family == AUTO_FAMILY and not spec.training.model:
        raise SpecError(
            "training.family",
            f"{AUTO_FAMILY!r} infers the family from training.model, which is not set: set "
            "training.model to the model's factory or name the family",
        )


def _check_names(spec: JobSpec) -> None:
    """Refuse a ``project`` or ``user`` as no project or user is named (the control plane
    creates them only by :data:`~danlu.core.spec_errors.NAME_RULE` and
    :data:`~danlu.core.spec_errors.USER_NAME_RULE`; its admission found none, or told a plain
    user they may submit only as themselves), and a ``gpu_type`` name with blanks around it
    (``' a100 '``: an unknown GPU type at admission, matching no GPU). Blanks around a name
    otherwise valid get the name to write. Not for a stored spec: one accepted with such a
    name is read as it was, and means what it meant."""
    rules = [
        ("project", spec.project, valid_name, NAME_RULE),
        ("user", spec.user, valid_user_name, USER_NAME_RULE),
    ]
    for field, text, valid, rule in rules:
        if valid(text):
            continue
        trimmed = text.strip()
        if trimmed != text and valid(trimmed):
            raise SpecError(
                field,
                f"{quoted(text)} has blanks around it, and no {field} is named so: "
                f"write {quoted(trimmed)}",
            )
        raise SpecError(
            field,
            f"no {field} can be named {quoted(text)}: {name_error(text, rule)}; or leave "
            f"{field} out for 'default'",
        )
    names = spec.resources.gpu_type
    for i, name in enumerate(names):
        if name.strip() != name:
            raise SpecError(
                "resources.gpu_type",
                f"name {i + 1} of {len(names)} is {quoted(name)}, with blanks around it, which "
                f"no GPU type is named: write {quoted(name.strip())}",
            )


def _check_batch_sizes(training: TrainingHints) -> None:
    """Refuse batch sizes out of order: ``min_batch_size`` above ``max_batch_size``, or the
    ``global_batch_size`` outside them (a global batch above the largest became the largest
    itself: the scheduler's limits silently ignored the one written). Not for a stored spec: a
    job accepted with them is read as it was."""
    smallest, largest = training.min_batch_size, training.max_batch_size
    batch = training.global_batch_size
    if smallest is not None and largest is not None and smallest > largest:
        raise SpecError(
            "training.min_batch_size",
            f"{smallest} is above training.max_batch_size ({largest}): lower the smallest "
            "or raise the largest",
        )
    if batch is not None and largest is not None and batch > largest:
        raise SpecError(
            "training.global_batch_size",
            f"{batch} is above training.max_batch_size ({largest}), the largest global batch "
            f"the scheduler may choose: raise max_batch_size to {batch} or more, or lower "
            "global_batch_size",
        )
    if batch is not None and smallest is not None and batch < smallest:
        raise SpecError(
            "training.global_batch_size",
            f"{batch} is below training.min_batch_size ({smallest}): lower min_batch_size to "
            f"{batch} or less, or raise global_batch_size",
        )


def _check_gpu_types(res: Resources) -> None:
    """Refuse a ``gpu_type`` name that is empty or only blanks (``gpu_type: ['']``, ``gpu_type:
    ' '``): it names no GPU, and the spec passed until the control plane's admission called
    it an unknown GPU type (a job naming it could run on no GPU). Not for a stored spec: a job
    accepted with one (under an inventory with a type spelt so) is read as it was."""
    for i, name in enumerate(res.gpu_type):
        if not name.strip():
            raise SpecError(
                "resources.gpu_type",
                f"name {i + 1} of {len(res.gpu_type)} is {quoted(name)}, which names no GPU "
                "type: write a type such as A100-80GB or H100, or leave gpu_type out for any",
            )


def _check_sizes(res: Resources) -> None:
    """Refuse a ``gpu_memory`` or ``memory`` above 0 but below 1 MiB: a number without a
    unit is bytes, so ``gpu_memory: 24`` asked for 24 bytes per GPU (and ran), as
    ``--fake-gpus 4x80`` would make GPUs of 80 bytes. Not for a stored spec: a job accepted
    with one is read as it was."""
    for field, size in (("resources.gpu_memory", res.gpu_memory), ("resources.memory", res.memory)):
        if isinstance(size, int) and 0 < size < MiB:
            example = f"{size}GiB" if size < 1000 else "24GiB"  # 24: meant in GiB (or MiB)
            per = " per GPU" if field == "resources.gpu_memory" else ""
            raise SpecError(
                field,
                f"{format_bytes(size)}{per} is below 1 MiB (a number without a unit is bytes): "
                f"give the size a unit, e.g. {example}",
            )


def tilde_note(path: str) -> str:
    """``" (~ is not expanded: ...)"`` for a ``path`` written from a home (``~/runs``), which
    no shell expands in a spec and so is relative; ``""`` for any other."""
    if not path.startswith("~"):
        return ""
    return " (~ is not expanded here: write the home's own path, e.g. /home/you/...)"


MAX_PATH = 4096
"""The longest ``checkpoint_dir`` (Linux's PATH_MAX)."""
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_checkpoint_location(text: str) -> bool:
    """True for an absolute path or a URL (``file:/shared/ckpt`` too, a file URL without an
    authority) of at most :data:`MAX_PATH` characters: what the job can be handed as
    ``DANLU_CHECKPOINT_DIR`` whatever its working directory."""
    file_path = text[len(FILE_SCHEME) :] if is_file_url(text) else ""
    return 0 < len(text) <= MAX_PATH and (
        text.startswith("/") or bool(_URL.match(text)) or file_path.startswith("/")
    )


def _check_checkpoint_dir(location: str | None) -> None:
    """Refuse a ``checkpoint_dir`` the job cannot be handed: a file URL naming no directory of
    this machine (:func:`~danlu.core.file_url.local_file_path`: another host, a relative
    path, escapes decoding to a NUL or to no UTF-8; admission's 422 before, now here), or
    neither an absolute path nor a URL."""
    if location is None:
        return
    try:
        local_file_path(location)
    except FileUrlError as exc:
        raise SpecError(
            "checkpoint_dir",
            f"{exc}: write file:///shared/ckpt/run1 or /shared/ckpt/run1, or leave it out for "
            "a directory of the job's own",
        ) from None
    if not is_checkpoint_location(location):
        raise SpecError(
            "checkpoint_dir",
            f"{quoted(location)} is neither an absolute path nor a URL "
            f"(at most {MAX_PATH:,} characters){tilde_note(location)}: write "
            "/shared/ckpt/run1 or s3://bucket/run1, or leave it out for a directory of the "
            "job's own",
        )


def _check_command(spec: JobSpec) -> None:
    """Refuse a command that can never run: an empty argv written out (``command: []``) or
    a program that is empty or only blanks (``command: ['']``, ``[' ', train.py]``; with
    ``shell: true`` a script of blanks runs nothing). A spec that leaves ``command`` out is
    read (its default is empty), as one that is not submitted needs none; the control
    plane's admission requires one at submission."""
    if "command" in spec.model_fields_set and not spec.command:
        raise SpecError(
            "command",
            "is empty, and an empty argv runs nothing: give the program and its arguments, "
            "e.g. [python, train.py]",
        )
    if spec.command and not spec.command[0].strip():  # '' or ' ': no program, no script
        what, example = (
            ("the shell command", "['make && ./run']")
            if spec.shell
            else ("the program, then its arguments", "[python, train.py]")
        )
        empty = "empty" if not spec.command[0] else f"only blanks ({quoted(spec.command[0])})"
        raise SpecError("command", f"its first string is {empty}: give {what}, e.g. {example}")


def _check_exec_size(spec: JobSpec) -> None:
    """Refuse a command or environment no process can be started with (``E2BIG``): Linux
    takes at most :data:`MAX_EXEC_STRING` bytes in one argument or ``NAME=value`` and a few
    MiB in all, part of which the launch's own environment uses."""
    total = 0
    strings = [(f"command.{i}", arg) for i, arg in enumerate(spec.command)]
    strings += [(f"env.{key}", f"{key}={value}") for key, value in spec.env.items()]
    for field, text in strings:
        size = len(text.encode("utf-8", "surrogatepass")) + 1
        if size > MAX_EXEC_STRING:
            raise SpecError(
                field,
                f"is {size - 1:,} bytes; a process takes at most {MAX_EXEC_STRING - 1:,} in one "
                "argument or variable: pass large data in a file",
            )
        total += size + 8  # and its pointer
    if total > MAX_EXEC_TOTAL:
        raise SpecError(
            "command",
            f"the command and env come to {total:,} bytes; a launch takes at most "
            f"{MAX_EXEC_TOTAL:,}: pass large data in a file",
        )


def printed_text(spec: JobSpec) -> list[tuple[str, str]]:
    """The spec's names, paths and references as ``(field, text)``: the text fields a job
    is listed, shown or looked up by (``project``, ``user``, ``resources.gpu_type``,
    ``workdir``, ``checkpoint_dir``, ``training.model``, ``training.application``) and the
    names of ``env``. Not the ``command`` nor ``env``'s values, which may hold line breaks
    and tabs (a ``python -c`` program, a shell script); ``name`` and ``training.family``
    the spec's own checks restrict."""
    fields = [("project", spec.project), ("user", spec.user)]
    fields += [(f"resources.gpu_type.{i}", kind) for i, kind in enumerate(spec.resources.gpu_type)]
    optional = {
        "workdir": spec.workdir,
        "checkpoint_dir": spec.checkpoint_dir,
        "training.model": spec.training.model,
        "training.application": spec.training.application,
    }
    fields += [(field, text) for field, text in optional.items() if text is not None]
    fields += [("env", name) for name in spec.env]
    return fields


def check_printable(spec: JobSpec) -> None:
    """:class:`SpecError` on a field of :func:`printed_text` holding a control character
    (:func:`~danlu.core.values.control_character`: a line break, a tab, an ESC sequence, a
    bidirectional override): the spec is stored and shown to whoever lists the job, and
    names are refused with one elsewhere (a job's name, a token's label, a metric's name).
    Checked at submission only: a spec stored before still loads."""
    for field, text in printed_text(spec):
        char = control_character(text)
        if char is not None:
            what = "a variable name" if field == "env" else "this field"
            raise SpecError(
                field,
                f"{what} must not contain control characters (line breaks, tabs, ESC "
                f"sequences, bidirectional overrides), got {char!r} in {quoted(text)}: "
                "write it without them",
            )
