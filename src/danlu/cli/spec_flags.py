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


def _named(exc: SpecError, flag: str, message: str) -> FlagValueError:
    error = FlagValueError(exc.field, message)
    error.flag = flag
    return error


def by_flag(exc: SpecError, overrides: Mapping[str, Any], sets: Sequence[str]) -> SpecError:
    """``exc`` (the validation's error for one field) as a :class:`FlagValueError` naming
    the flag that gave that field its value: the last ``--set FIELD=...`` of it (``--set``
    is applied after the flags, so it wins), else the flag of ``overrides`` given for it
    (not None); ``exc`` itself when the value came from the file."""
    if not exc.field:
        return exc
    for item in reversed(sets):
        key, sep, _ = item.partition("=")
        if sep and key.strip() == exc.field:
            return _named(exc, f"--set {item!r}", str(exc))
    if exc.field in OVERRIDE_FLAGS and overrides.get(exc.field) is not None:
        return _named(exc, OVERRIDE_FLAGS[exc.field], exc.message)
    return exc
