"""Which ``danlu submit`` flag gave a spec field its value, so that a value the spec's
validation refuses is named by that flag, not by the spec file (which may not even hold
the field: ``spec.yaml: name: use 1-63 letters ...`` for ``--name "my job"``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from danlu.core.errors import SpecError

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
    spec field (``name``), ``flag`` the flag (set by :func:`by_flag`)."""

    flag = ""

    def __str__(self) -> str:
        return f"{self.flag}: {self.message}" if self.flag else super().__str__()


def flag_error(field: str, flag: str, message: str) -> FlagValueError:
    """The error for the spec field ``field`` whose value the flag ``flag`` (with its
    value, where several are given: ``--env 'HF_HOME'``) gave, its text ``flag: message``."""
    error = FlagValueError(field, message)
    error.flag = flag
    return error


def _named(exc: SpecError, flag: str, message: str) -> FlagValueError:
    return flag_error(exc.field, flag, message)


def by_flag(
    exc: SpecError,
    overrides: Mapping[str, Any],
    sets: Sequence[str],
    after: Sequence[str] = (),
    after_from: int = 0,
) -> SpecError:
    """``exc`` (the validation's error for one field) as a :class:`FlagValueError` naming
    the flag that gave that field its value: the last ``--set FIELD=...`` of it (``--set``
    is applied after the flags, so it wins), else the flag of ``overrides`` given for it
    (not None), else, for ``depends_on.N`` from ``after_from`` on (the entries ``--after``
    added, one for each of ``after``), that ``--after`` and its value (``--after
    'ID:fail': Input should be ...``: the user wrote no ``depends_on``); ``exc`` itself
    when the value came from the file."""
    if not exc.field:
        return exc
    if (named := by_after(exc, after, after_from)) is not exc:
        return named
    for item in reversed(sets):
        key, sep, _ = item.partition("=")
        if sep and key.strip() == exc.field:
            return _named(exc, f"--set {item!r}", str(exc))
    if exc.field in OVERRIDE_FLAGS and overrides.get(exc.field) is not None:
        return _named(exc, OVERRIDE_FLAGS[exc.field], exc.message)
    return exc


def by_after(exc: SpecError, after: Sequence[str], after_from: int) -> SpecError:
    """``exc`` (the local validation's error, or the server's refusal of a submission: a
    job's field, or an array's trial's, ``trial.depends_on.N.job``) as a
    :class:`FlagValueError` naming the ``--after`` that added the ``depends_on`` entry it
    is about (``after``: the values given, added from index ``after_from`` on); ``exc``
    itself for any other field (the file's own dependencies included)."""
    item = _after_item((exc.field or "").removeprefix("trial."), after, after_from)
    return exc if item is None else _named(exc, f"--after {item!r}", exc.message)


def _after_item(field: str, after: Sequence[str], after_from: int) -> str | None:
    """The ``--after`` value that added the ``depends_on`` entry ``field`` lies in
    (``depends_on.3.condition`` with ``after_from`` 2: ``after[1]``), or None for a field
    of another entry (the file's own) or outside ``depends_on``."""
    top, _, rest = field.partition(".")
    index = rest.partition(".")[0]
    if top != "depends_on" or not index.isdigit():
        return None
    at = int(index) - after_from
    return after[at] if 0 <= at < len(after) else None
