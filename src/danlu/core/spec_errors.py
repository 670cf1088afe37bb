"""What a refused job spec says: pydantic's errors as one
:class:`~danlu.core.errors.SpecError` naming the field and the fix (:func:`spec_error`), and
the rule of a job or sweep name with the error that says what breaks it (:func:`valid_name`,
:func:`name_error`). :mod:`danlu.core.spec` re-exports them."""

from __future__ import annotations

import functools
import re
from typing import Any

from pydantic import ValidationError

from danlu.core.errors import SpecError
from danlu.core.spec_text import type_name, written_text
from danlu.core.values import quoted

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")


def valid_name(text: str) -> bool:
    """True for a job (or sweep) name: 1-63 letters, digits, '.', '_' or '-', starting with a
    letter or digit."""
    return bool(_NAME.match(text))


NAME_RULE = "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
"""What a job or sweep name may be (:func:`valid_name`), as its error says it."""


def name_error(text: str) -> str:
    """The error for ``text``, a name :func:`valid_name` refuses: :data:`NAME_RULE`, and
    where the rule alone misleads, what in ``text`` breaks it: a letter or digit outside
    ASCII (``训`` in ``训练``, all "letters"), or more than 63 characters (which no one
    counts by eye). A blank, a ``/`` or a first ``-`` the rule names itself."""
    foreign = next((c for c in text if c.isalnum() and not c.isascii()), None)
    if foreign is not None:
        return f"{NAME_RULE}: {quoted(foreign)} is not an ASCII letter or digit"
    if len(text) > 63:
        return f"{NAME_RULE}: it has {len(text):,} characters"
    return NAME_RULE


def spec_error(exc: ValidationError, kind: str = "job spec") -> SpecError:
    """pydantic's first error as a :class:`SpecError` naming the field and the fix (with how
    many more there are). A model-level check names its field itself: ``"field: message"``.
    ``kind``: the spec an unknown field is checked against. pydantic's words that say no fix
    are replaced: a field of another section (``gpus: 2`` at the top level) names where it
    goes; a null (``priority:`` left empty) and a section that is no mapping say so; a key
    YAML read as no text (``on:``) names the mapping it is in, not ``1``."""
    errors = exc.errors()
    first = errors[0]
    field = ".".join(str(p) for p in first["loc"])
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    kind_of_error, given = first.get("type", ""), first.get("input")
    if kind_of_error == "missing":
        message = "this field is required"
    if kind_of_error == "extra_forbidden":
        message = f"unknown field; check the spelling against the {kind} reference"
        home = _field_homes().get(str(first["loc"][-1])) if kind == "job spec" else None
        section = ".".join(str(p) for p in first["loc"][:-1])
        if home is not None and home != field and section in ("", "resources", "training"):
            message = f"unknown field here; it is a field of {_section(home)}: write it as {home}"
    if kind_of_error.endswith("_type") and given is None:  # priority:, resources: (empty)
        message = _NULL + (_NULL_SECTION if kind_of_error == "model_type" else _NULL_VALUE)
    elif kind_of_error == "model_type":  # resources: 2, not "...or instance of Resources"
        message = f"must be a mapping of its fields, e.g. {{field: value}}, not {quoted(given)}"
    if not field and ": " in message:
        field, _, message = message.partition(": ")
    if kind_of_error == "invalid_key":  # on: 2, 1: 2; the key is no field, its mapping is
        field = ".".join(str(p) for p in first["loc"][:-1])
        message = f"a key YAML read as {_key_kind(given)}: no field is named so; check the "
        message += f"spelling against the {kind} reference, or quote the key"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return SpecError(field, message + more)


@functools.cache
def _field_homes() -> dict[str, str]:
    """Where each field of a job spec and its ``resources`` and ``training`` goes, by its
    name (no two share a name): ``gpus`` -> ``resources.gpus``, for the error of one written
    in another section (``gpus: 2`` at the top level)."""
    from danlu.core.spec import JobSpec, Resources, TrainingHints  # it imports this module

    sections = (("", JobSpec), ("resources.", Resources), ("training.", TrainingHints))
    return {name: prefix + name for prefix, model in sections for name in model.model_fields}


def _section(path: str) -> str:
    """The section a field's dotted ``path`` lies in, as an error names it."""
    return path.rpartition(".")[0] or "the spec itself (its top level)"


_NULL = "is null (YAML reads an empty value, ~ and null so)"
_NULL_VALUE = ": give it a value (or leave it out, for its default)"
_NULL_SECTION = ": write its fields indented under it, on the lines below, or leave it out"


def _key_kind(key: Any) -> str:
    """What YAML read a mapping's key as, when it is no text: ``on`` as a boolean, ``010``
    as a number (shown as written), ``~`` as null."""
    if isinstance(key, bool):
        return "a boolean (unquoted on, off, yes, no, true and false are)"
    if key is None:
        return "null (~, or a key left empty)"
    if isinstance(key, int | float):
        return f"a number ({written_text(key)})"
    return f"a {type_name(key)} ({quoted(key)})"
