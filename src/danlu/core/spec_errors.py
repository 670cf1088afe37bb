"""What a refused job spec says: pydantic's errors as one
:class:`~danlu.core.errors.SpecError` naming the field and the fix (:func:`spec_error`), and
the rule of a job or sweep name with the error that says what breaks it (:func:`valid_name`,
:func:`name_error`). :mod:`danlu.core.spec` re-exports them."""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import ValidationError

from danlu.core.errors import SpecError
from danlu.core.spec_hints import choice_hint, field_hint, sweep_example
from danlu.core.spec_text import given_words, type_name, written_text
from danlu.core.units import format_duration
from danlu.core.values import quoted

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")


def valid_name(text: str) -> bool:
    """True for a job (or sweep) name: 1-63 letters, digits, '.', '_' or '-', starting with a
    letter or digit."""
    return bool(_NAME.match(text))


NAME_RULE = "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
"""What a job or sweep name may be (:func:`valid_name`), as its error says it; a project's
name too (the control plane creates a project only so named)."""

_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}\Z")


def valid_user_name(text: str) -> bool:
    """True for a user's name: :func:`valid_name`'s rule with ``@`` taken too (an e-mail
    address); the control plane creates a user only so named."""
    return bool(_USER_NAME.match(text))


USER_NAME_RULE = "use 1-63 letters, digits, '.', '_', '@' or '-', starting with a letter or digit"
"""What a user's name may be (:func:`valid_user_name`), as its error says it."""


def name_error(text: str, rule: str = NAME_RULE) -> str:
    """The error for ``text``, a name :func:`valid_name` (or, with ``rule`` its rule,
    :func:`valid_user_name`) refuses: ``rule``, and where the rule alone misleads, what in
    ``text`` breaks it: a letter or digit outside ASCII (``训`` in ``训练``, all
    "letters"), or more than 63 characters (which no one counts by eye). A blank, a ``/`` or
    a first ``-`` the rule names itself."""
    foreign = next((c for c in text if c.isalnum() and not c.isascii()), None)
    if foreign is not None:
        return f"{rule}: {quoted(foreign)} is not an ASCII letter or digit"
    if len(text) > 63:
        return f"{rule}: it has {len(text):,} characters"
    return rule


def spec_error(exc: ValidationError, kind: str = "job spec") -> SpecError:
    """pydantic's first error as a :class:`SpecError` naming the field and the fix (with how
    many more there are). A model-level check names its field itself: ``"field: message"``.
    ``kind``: the spec an unknown field is checked against. pydantic's words that say no fix
    are replaced: a field of another section (``gpus: 2`` at the top level) names where it
    goes; a null (``priority:`` left empty) and a section that is no mapping say so; a key
    YAML read as no text (``on:``) names the mapping it is in, not ``1``; text where a
    number goes (``cpus: 4 cores``) is shown with what to write; a value that none of a
    union's types takes (``low: small``), which pydantic reports once a type at the field
    plus the type's name (``parameters.lr.low.int``), is told once, at the field. A key
    spelt nearly as a field, or as another tool names it, names the field
    (:func:`~danlu.core.spec_hints.field_hint`), before pydantic's "missing" of that field
    (``paramaters``); a number past a bound is shown with the value (a duration's in
    seconds, with how long that is)."""
    errors = _misspelt_for_missing(exc.errors(), kind)
    first = errors[0]
    members = _union_members(errors)
    loc = first["loc"][:-1] if members else first["loc"]
    field = ".".join(str(p) for p in loc)
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    kind_of_error, given = first.get("type", ""), first.get("input")
    if members:  # one problem, told once per type of the union: said once, for them all
        errors = errors[len(members) - 1 :]
        words = dict.fromkeys(
            _UNION_WORDS[m] for m in members if m != "int" or "float" not in members
        )
        message = f"must be {_either(list(words))}, not {given_words(given)}"
        kind_of_error = "union"
    if kind_of_error == "missing":
        message = "this field is required"
    if kind_of_error == "extra_forbidden":
        message = f"unknown field; check the spelling against the {kind} reference"
        section = ".".join(str(p) for p in first["loc"][:-1])
        meant, home = field_hint(str(first["loc"][-1]), section, kind)
        if meant is not None:  # Priority, gpu-memory, paramaters
            message = f"unknown field; did you mean {meant}? {message.partition('; ')[2]}"
        elif home is not None:  # gpus: 2 at the top level
            message = f"unknown field here; it is a field of {_section(home)}: write it as {home}"
    if kind_of_error.endswith("_type") and given is None:  # priority:, resources: (empty)
        message = _NULL + (_NULL_SECTION if kind_of_error == "model_type" else _NULL_VALUE)
    elif kind_of_error == "model_type":  # resources: 2, not "...or instance of Resources"
        message = (
            f"must be a mapping of its fields, e.g. {{field: value}}, not {given_words(given)}"
        )
        message += sweep_example(field, given, kind)  # metric: loss, lr: [0.1, 0.2]
    elif kind_of_error == "dict_type":  # parameters: [lr, wd]
        message = f"must be a mapping, e.g. {{name: value}}, not {given_words(given)}"
        message += sweep_example(field, given, kind)  # trial: job.yaml
    elif kind_of_error in _LENGTHS:  # parameters: {}, values: [], depends_on: [101 ids]
        example = sweep_example(field, given, kind)  # parameters: {}
        message = "is empty" + example if example else _length_message(kind_of_error, first, given)
    elif kind_of_error == "list_type":  # command: {python: train.py}
        message = f"must be a list, e.g. [first, second], not {given_words(given)}"
    elif kind_of_error != "union" and (plain := value_message(first, field)) is not None:
        message = plain
    if not field and ": " in message:
        field, _, message = message.partition(": ")
    if first["loc"][-1:] == ("[key]",):  # parameters: {1: ...}, a key of a str-keyed dict
        field = ".".join(str(p) for p in first["loc"][:-1])
        number = isinstance(given, int | float) and not isinstance(given, bool)
        fix = f"quote it, '{written_text(given)}'" if number else "quote it"
        message = f"a key YAML read as {_key_kind(given)}: {fix}"
    if kind_of_error == "invalid_key":  # on: 2, 1: 2; the key is no field, its mapping is
        field = ".".join(str(p) for p in first["loc"][:-1])
        message = f"a key YAML read as {_key_kind(given)}: no field is named so; check the "
        message += f"spelling against the {kind} reference, or quote the key"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return SpecError(field, message + more)


def value_message(error: Any, field: str = "") -> str | None:
    """The message, in danlu's words, of a pydantic ``error`` of a plain value, whatever
    model it is of (a spec's field, a setting): a value of another kind (``must be text,
    not a list ([1])``), none of the choices (``'grit' is not one of random, grid or tpe
    (did you mean grid?)``), text that is no number (``'4 cores' is not a number: write
    ...``), a number beyond a bound or too long a list, with the value; None for another
    error. ``field``: its dotted path (a duration's bound is said in seconds)."""
    kind_of_error, given = error.get("type", ""), error.get("input")
    ctx = error.get("ctx") or {}
    if kind_of_error in _TAKES:  # name: [a, b], priority: {a: 1}, shell: 1.5
        return f"must be {_TAKES[kind_of_error]}, not {given_words(given)}"
    if kind_of_error == "literal_error":  # precision: fp23, method: grit
        return _choice_message(given, ctx)
    if kind_of_error in _NUMBER_FIXES:  # cpus: 4 cores, priority: high
        what, fix = _NUMBER_FIXES[kind_of_error]
        number = isinstance(given, int | float) and not isinstance(given, bool)
        return f"{written_text(given) if number else given_words(given)} is not {what}: {fix}"
    if kind_of_error == "int_parsing_size":  # priority: '1000...' (5,000 digits, quoted)
        digits = len(str(given).strip().lstrip("+-").lstrip("0"))
        return (
            f"a number of {digits:,} digits is beyond the field's range (no number danlu "
            "reads lies beyond 2**62): write the number meant"
        )
    if kind_of_error in _BOUNDS:  # time_limit: 0, max_restarts: -1, preempt_grace: 2h
        return _bound_message(kind_of_error, ctx, given, field)
    if kind_of_error in _LENGTHS:  # values: [], depends_on: [101 ids]
        return _length_message(kind_of_error, error, given)
    return None


def _misspelt_for_missing(errors: list[Any], kind: str) -> list[Any]:
    """``errors`` with a required field's "missing" left out where a key of its section is
    that field misspelt (``paramaters:``), which is then told first: pydantic reports the
    missing field first, so the error said "parameters: this field is required" and the
    user looked for a field they had written."""
    misspelt: dict[str, Any] = {}
    for error in errors:
        if error.get("type") == "extra_forbidden":
            section = _dotted(error["loc"][:-1])
            meant = field_hint(str(error["loc"][-1]), section, kind)[0]
            if meant is not None:
                misspelt.setdefault(meant, error)
    missing = {_dotted(e["loc"]) for e in errors if e.get("type") == "missing"}
    told = [error for path, error in misspelt.items() if path in missing]
    if not told:
        return errors
    explained = [e for e in errors if e.get("type") == "missing" and _dotted(e["loc"]) in misspelt]
    return [*told, *(e for e in errors if not any(e is t for t in [*told, *explained]))]


def _dotted(loc: tuple[int | str, ...]) -> str:
    """An error's location as a dotted path (``parameters.lr.low``)."""
    return ".".join(str(part) for part in loc)


def _section(path: str) -> str:
    """The section a field's dotted ``path`` lies in, as an error names it."""
    return path.rpartition(".")[0] or "the spec itself (its top level)"


_UNION_WORDS = {"str": "text", "int": "a number", "float": "a number", "bool": "a boolean"}
"""What each type of a union of plain types takes, by the name pydantic adds to an error's
location for it (``parameters.lr.low.int``)."""


def _union_members(errors: list[Any]) -> list[str]:
    """The types of a union that each refused the first of ``errors``' value (pydantic
    reports such a value once per type, at its field with the type's name added:
    ``parameters.lr.low.int``, ``parameters.lr.low.float``), when it is so; else none. Two
    or more errors in a row at one field's location plus a name of :data:`_UNION_WORDS`,
    of the same value."""
    first = errors[0]
    loc, given = first["loc"], first.get("input")
    if not loc:  # a check of the whole spec
        return []
    members: list[str] = []
    for error in errors:
        where = error["loc"]
        same = len(where) == len(loc) and where[:-1] == loc[:-1]
        if not (same and where[-1] in _UNION_WORDS and error.get("input") is given):
            break
        members.append(str(where[-1]))
    return members if len(members) > 1 else []


def _either(words: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


_TAKES = {
    "string_type": "text",
    "int_type": "a whole number",
    "float_type": "a number",
    "bool_type": "true or false",
}
"""What a field takes, by pydantic's error type of a value of another kind (a list, a
mapping, a number where text goes): pydantic said only "Input should be a valid string"
(or integer, number, boolean), without what was given."""


def _choice_message(given: Any, ctx: dict[str, Any]) -> str:
    """A value none of an enumerated field's choices (``ctx["expected"]``, pydantic's
    ``'a', 'b' or 'c'``): ``'grit' is not one of random, grid or tpe``, with the choice
    meant where it is spelt nearly so (:func:`~danlu.core.spec_hints.choice_hint`:
    ``'minimise' ... (did you mean minimize?)``). pydantic said only "Input should be 'a',
    'b' or 'c'", without the value."""
    choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
    if len(choices) == 1:  # early_stopping.rule: median
        message = f"{given_words(given)} is not {choices[0]}, the one choice"
    else:
        message = f"{given_words(given)} is not one of {_either(choices or ['the listed'])}"
    meant = choice_hint(given, choices) if isinstance(given, str) else None
    return message + (f" (did you mean {meant}?)" if meant is not None else "")


_LENGTHS = {
    "too_short": ("at least", "min_length"),
    "too_long": ("at most", "max_length"),
    "string_too_short": ("at least", "min_length"),
    "string_too_long": ("at most", "max_length"),
}
"""pydantic's error types of a list, a mapping or text of too few or too many items (or
characters): how the message says the bound and its key in the error's ``ctx``."""


def _length_message(kind_of_error: str, error: Any, given: Any) -> str:
    """A list, mapping or text (``given``) of too few or too many items, in the spec's
    words: ``must hold at most 100 entries, not 101``, ``is empty: give at least 1 entry``
    (pydantic said "List should have at most 100 items after validation, not 101")."""
    words, key = _LENGTHS[kind_of_error]
    ctx = error.get("ctx") or {}
    bound = ctx.get(key)
    actual = ctx.get("actual_length", len(given) if isinstance(given, str) else None)
    unit = "character" if kind_of_error.startswith("string") else "entry"
    units = unit if bound == 1 else ("characters" if unit == "character" else "entries")
    if actual == 0:
        return f"is empty: give {words} {bound} {units}"
    shown = "?" if actual is None else f"{actual:,}" if isinstance(actual, int) else actual
    return f"must hold {words} {bound:,} {units}, not {shown}"


_NUMBER_FIXES = {
    "int_parsing": ("a whole number", "write a whole number, e.g. 4, without a unit"),
    "int_from_float": ("a whole number", "write a whole number, e.g. 4"),
    "float_parsing": ("a number", "write a number, e.g. 4 or 0.5, without a unit or a %"),
    "bool_parsing": ("true or false", "write true or false"),
}
"""What a field takes and what to write instead, by pydantic's error type, of text (or a
fraction) where a number (or a boolean: ``preemptible: maybe``) goes: ``'4 cores' is not a
number: write a number, ...``. pydantic said "Input should be a valid number, unable to
parse string as a number", without the value or the fix."""

_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "greater than or equal to"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "less than or equal to"),
}
"""pydantic's error types of a number out of a field's bound: the bound's key in the
error's ``ctx``, and how the message says it (in pydantic's words)."""

_DURATION_FIELDS = frozenset(
    {"deadline", "time_limit", "preempt_grace", "training.expected_duration"}
)
"""A job spec's fields that take a duration (``2h``, ``04:00:00``), read as seconds."""


def _bound_message(kind_of_error: str, ctx: dict[str, Any], given: Any, field: str) -> str:
    """A number beyond a field's bound, said with the value (pydantic said only "Input should
    be greater than 0"); a duration's in seconds, as the field reads ``2h``, with how long
    that is (``preempt_grace: 2h``: "must be less than or equal to 3600 seconds (1h), not
    7200 seconds (2h)")."""
    key, words = _BOUNDS[kind_of_error]
    bound = ctx.get(key)
    number = isinstance(given, int | float) and not isinstance(given, bool)
    if not (number and isinstance(bound, int | float)):  # DANLU_PORT=99999: text
        shown = _number(bound) if isinstance(bound, int | float) else quoted(bound)
        return f"must be {words} {shown} (got {quoted(given)})"
    if field not in _DURATION_FIELDS:
        return f"must be {words} {_number(bound)}, not {_number(given)}"
    unset = ", or leave it out" if key == "gt" and bound == 0 else ""  # deadline: 0
    return f"must be {words} {_seconds(bound)}, not {_seconds(given)}{unset}"


def _number(value: float) -> str:
    """A bound or a value as an error shows it: ``0`` and ``1``, not ``0.0`` and ``1.0``."""
    return f"{value:g}" if isinstance(value, float) else written_text(value)


def _seconds(value: float) -> str:
    """``7200`` seconds as ``7200 seconds (2h)``; ``0`` as ``0 seconds``."""
    shown = f"{_number(value)} seconds"
    if value >= 60 and math.isfinite(value):
        return f"{shown} ({format_duration(value)})"
    return shown


NULL_MESSAGE = _NULL = "is null (YAML reads an empty value, ~ and null so)"
"""What an error says of a null where a field takes a value, before what to do."""
NULL_VALUE = _NULL_VALUE = ": give it a value (or leave it out, for its default)"
"""What to do about a null where a field takes a plain value."""
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
