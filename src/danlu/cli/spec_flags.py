"""Which flag of ``danlu submit`` or ``danlu rerun`` (``danlu run``'s, ``danlu update``'s)
gave a spec field its value, so that a value refused, by the validation here or by the
server, is named by that flag: not by the spec file, which may not even hold the field
(``spec.yaml: name: use 1-63 letters ...`` for ``--name "my job"``), nor by the server's
path of it (``env.SEED`` for ``--env SEED=...``).

:func:`flag_writes` lists what the flags write into a spec, in the order
:func:`~danlu.cli.spec_build.apply_flags` writes it (``--after``'s entries, added last:
:func:`after_writes`); :func:`named_by_flag` names a refusal by the last of them that gave
the refused field its final value. Both sides use that one list: the spec is built from it,
and its refusals named by it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml

from danlu.client.errors import ApiError
from danlu.core.errors import SpecError
from danlu.core.spec import TEXT_FIELDS
from danlu.core.spec_text import load_yaml
from danlu.core.values import quoted, visible

OVERRIDE_FLAGS = {
    "name": "--name",
    "priority": "--priority",
    "project": "--project",
    "user": "--user",
    "resources.gpus": "--gpus",
    "resources.gpu_memory": "--gpu-memory",
    "time_limit": "--time-limit",
    "max_restarts": "--max-restarts",
}
"""The ``danlu submit`` (and ``danlu run``) flag that sets each spec field (the
``overrides`` of :func:`~danlu.cli.spec_build.build_spec`)."""


class FlagValueError(SpecError):
    """A spec field's value, given by a flag, that the validation refused: its text names
    the flag (``--name: use 1-63 letters ...``), not the spec file; ``field`` is still the
    spec field (``name``), ``flag`` the flag (set by :func:`flag_error`)."""

    flag = ""

    def __str__(self) -> str:
        return f"{self.flag}: {self.message}" if self.flag else super().__str__()


def flag_error(field: str, flag: str, message: str) -> FlagValueError:
    """The error for the spec field ``field`` whose value the flag ``flag`` (with its
    value, where several are given: ``--env 'HF_HOME'``) gave, its text ``flag: message``."""
    error = FlagValueError(field, message)
    error.flag = flag
    return error


@dataclass(frozen=True)
class FlagWrite:
    """A value one flag writes into a spec (:func:`flag_writes`)."""

    path: tuple[str, ...]
    """The field written, by its keys: ``("resources", "gpus")``; ``("env", "A.B")`` for
    ``--env A.B=1`` (a variable's name is one key, dots and all)."""
    value: Any
    """What is written there. The fields under it that a mapping holds are its too
    (``--set resources={gpus: 2}`` gives ``resources.gpus``), and all fields under any
    other value (``--gpus 1..4`` gives ``resources.gpus.min``)."""
    flag: str
    """The flag, as a refusal names it: ``--gpus``, ``--env SEED``, ``--set 'env.SEED=3'``."""
    says_field: bool = False
    """Whether the refusal says the field after the flag (``--set 'resources={gpus: 9}':
    resources.gpus: ...``): a ``--set`` writes a field of its own choosing, or several."""
    variable: bool = False
    """An ``--env`` variable: written into the spec's ``env`` by its name, where ``env`` is
    a mapping (else the validation refuses the file's ``env``)."""

    def gives(self, path: tuple[str, ...]) -> bool:
        """Whether this write gave the field at ``path`` its value: the field written, or
        one under it that its value holds."""
        if path[: len(self.path)] != self.path:
            return False
        value = self.value
        for key in path[len(self.path) :]:
            if not isinstance(value, Mapping):
                return True  # written over all that was under it
            if key not in value:
                return False
            value = value[key]
        return True

    def replaces(self, path: tuple[str, ...]) -> bool:
        """Whether this write replaced the field at ``path``: it wrote that field, or one
        above it (``--set resources={cpus: 4}`` leaves no ``resources.gpus`` an earlier
        ``--gpus`` gave)."""
        return path[: len(self.path)] == self.path


def set_value(key: str, raw: str) -> Any:
    """The value of ``--set key=raw``: YAML read as a spec file is
    (:func:`~danlu.core.spec_text.load_yaml`: ``2``, ``[A100, H100]``, ``null``; ``010`` is 10 and
    ``1:00:00:00`` text, as in the file), but for an environment variable always the text as
    written (``env.MODE=null``), and for a text field (:data:`~danlu.core.spec.TEXT_FIELDS`)
    the text, not a number YAML reads in it (``name=2024``); ``null`` still unsets a text
    field that may be unset. A mapping with a key written twice is refused, naming it."""
    if key.startswith("env."):
        return raw  # environment values are strings, never YAML numbers or null
    try:
        value = load_yaml(raw) if raw else ""
    except SpecError as exc:  # a key written twice: its path within the field set
        raise SpecError(f"{key}.{exc.field}" if exc.field else key, exc.message) from None
    except (yaml.YAMLError, RecursionError, ValueError):  # ValueError: 5,000 digits
        return raw
    nullable = TEXT_FIELDS.get(key)
    if nullable is None or isinstance(value, str) or (value is None and nullable):
        return value
    return raw


def flag_writes(
    overrides: Mapping[str, Any],
    sets: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> list[FlagWrite]:
    """What the flags write into a spec, in the order they are written, the last winning:
    the ``overrides`` given (dotted fields of :data:`OVERRIDE_FLAGS`, named by its flags;
    None: not given), then each variable of ``env`` (``--env NAME=VALUE``, by its name), then
    each ``--set key=value`` of ``sets`` (its value: :func:`set_value`); an item of
    ``sets`` without ``=`` is a :class:`FlagValueError` naming it and saying how to write
    one."""
    writes = [
        FlagWrite(tuple(key.split(".")), value, OVERRIDE_FLAGS[key])
        for key, value in overrides.items()
        if value is not None
    ]
    for name, value in (env or {}).items():
        writes.append(FlagWrite(("env", name), value, f"--env {name}", variable=True))
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep:  # named by the flag, not the spec file, which is not at fault
            raise flag_error(
                key, f"--set {quoted(item)}", "write key=value, e.g. --set resources.gpus=2"
            )
        key = key.strip()
        value = set_value(key, raw)
        writes.append(FlagWrite(tuple(key.split(".")), value, f"--set {quoted(item)}", True))
    return writes


def named_writes(flags: Mapping[str, str]) -> list[FlagWrite]:
    """Writes of the fields ``flags`` names (dotted field: its flag; ``danlu update``'s),
    each giving all the fields under its own."""
    return [FlagWrite(field_path(field), None, flag) for field, flag in flags.items()]


def after_writes(after: Sequence[str], after_from: int) -> list[FlagWrite]:
    """The ``depends_on`` entries ``--after`` added, one for each of ``after`` from index
    ``after_from`` on (after the file's own), each named by that ``--after`` and its value
    (``--after 'ID:fail': ...``: the user wrote no ``depends_on``)."""
    return [
        FlagWrite(("depends_on", str(after_from + at)), None, f"--after {item!r}")
        for at, item in enumerate(after)
    ]


def field_path(field: str) -> tuple[str, ...]:
    """The keys of a refused dotted ``field`` (``resources.gpus.min``), without the
    ``trial.`` the server names an array task's field with (``trial.resources.gpus``: the
    spec's ``resources.gpus``); a variable of ``env`` is one key (``env.A.B``:
    ``("env", "A.B")``)."""
    field = field.removeprefix("trial.")
    top, dot, rest = field.partition(".")
    return ("env", rest) if top == "env" and dot else tuple(field.split("."))


def last_write(writes: Sequence[FlagWrite], field: str) -> FlagWrite | None:
    """The write of ``writes`` (in the order written) that gave the dotted ``field`` its
    final value; None when none did (the spec file's value, or the finished job's that a
    rerun keeps), a later write having replaced an earlier one's included."""
    path = field_path(field)
    for write in reversed(writes):
        if write.gives(path):
            return write
        if write.replaces(path):
            return None
    return None


Refusal = TypeVar("Refusal", SpecError, ApiError)


def named_by_flag(exc: Refusal, writes: Sequence[FlagWrite]) -> Refusal | FlagValueError:
    """``exc``, the validation's refusal of one field or the server's, as a
    :class:`FlagValueError` naming the flag of ``writes`` that gave that field its final
    value (:func:`last_write`): ``--gpus: ...``, ``--env SEED: ...``, ``--set
    'env.SEED=3': env.SEED: ...``; ``exc`` itself for a field no flag gave, for one it
    names no field of, and for one a flag already names. The server's words stay on one
    line, as its refusal's own text does (a line break written ``\\n``)."""
    if isinstance(exc, FlagValueError) or not exc.field:
        return exc
    write = last_write(writes, exc.field)
    if write is None:
        return exc
    message = f"{exc.field}: {exc.message}" if write.says_field else exc.message
    if isinstance(exc, ApiError):
        message = visible(message)
    return flag_error(exc.field, write.flag, message)
