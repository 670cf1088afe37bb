"""Reading a spec's text (a job's, a sweep's): YAML, read with YAML 1.2's numbers, or JSON,
either refusing a key written twice with its dotted path. :mod:`danlu.core.spec` validates
what it gives."""

from __future__ import annotations

import datetime
import json
import re
import sys
from typing import Any, overload

import yaml

from danlu.core.errors import SpecError
from danlu.core.values import MAX_DEPTH, quoted, show_number


def parse_text(text: str, is_json: bool) -> Any:
    """The data of a spec's ``text``: JSON when ``is_json``, else YAML (:func:`load_yaml`);
    every error is a :class:`SpecError` saying what is wrong."""
    kind = "JSON" if is_json else "YAML"
    try:
        return _load_json(text.removeprefix("\ufeff")) if is_json else load_yaml(text)
    except SpecError:
        raise
    except json.JSONDecodeError as exc:
        raise SpecError("", f"the job spec is not valid {kind}: {exc}") from None
    except yaml.YAMLError as exc:
        fix = yaml_fix(exc)
        raise SpecError("", f"the job spec is not valid {kind}: {exc}{fix}") from None
    except RecursionError:
        raise SpecError("", f"the job spec nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # a date that does not exist, a number of 5,000 digits
        reason = str(exc)
        if "integer string conversion" in reason:
            reason = f"a number in it has more than {sys.get_int_max_str_digits():,} digits"
        raise SpecError("", f"the job spec is not valid {kind}: {reason}") from None


def yaml_fix(exc: yaml.YAMLError) -> str:
    """What to do about ``exc``, when it is one of the common slips whose PyYAML words say
    only what the reader met: a tab (``found character '\\t' that cannot start any
    token``); a mapping written on its key's line (``resources: gpus: 1``) or a key without
    a space after its colon (``name:a``), both ``mapping values are not allowed here``; a
    key indented unlike its siblings (``expected <block end>``). Empty for any other
    error; else a new line saying the fix, with the line PyYAML names."""
    problem = str(getattr(exc, "problem", None) or "")
    mark = getattr(exc, "problem_mark", None)
    line = f" on line {mark.line + 1}" if isinstance(mark, yaml.Mark) else ""
    if "'\\t'" in problem:
        return f"\nYAML indents with spaces, never tabs: replace the tab{line} with spaces"
    if problem.startswith("mapping values are not allowed"):
        return (
            f"\na ': '{line} where YAML takes none: write a mapping on the lines below its "
            "key, indented, or in braces (resources: {gpus: 1}); quote a value that holds "
            "': '; give each key above it a space after its colon (name: a, not name:a)"
        )
    if problem.startswith("expected <block end>"):
        return f"\nindent every key of one mapping alike: check the indentation{line}"
    return ""


def _twice(path: str, key: object, lines: str = "", fix: str = "write the key once") -> SpecError:
    field = f"{path}.{key}" if path else str(key)
    return SpecError(
        field, f"written twice{lines}; the later value would silently replace the earlier: {fix}"
    )


class _SpecLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading numbers as YAML 1.2's core schema does, and refusing a
    key written twice in one mapping, at any depth.

    Numbers: PyYAML follows YAML 1.1, where ``time_limit: 1:00:00:00`` was the sexagesimal
    216000 (60 hours, not the day meant; quoted, the text is no duration and refused),
    ``priority: 010`` octal 8, ``gpus: 1:4`` (for ``1..4``) 64 GPUs and ``0b101`` 5. Here an
    integer is decimal digits (``010`` is 10, as quoted text is read), ``0o17`` or ``0x1F``,
    and a float ``1.5``, ``1e-3`` (text to YAML 1.1), ``.inf`` or ``.nan``; anything else
    (``1:00``, ``1_000``) is text, which the field reads as it reads it quoted.

    Keys: YAML forbids a key twice; PyYAML kept the later value, so ``resources`` given twice
    lost the first's GPUs. The document's nodes are checked before they are built, so that
    the error names the key's dotted path and both lines. A merge key ``<<`` counts too (the
    later merge won): ``<<: [*a, *b]`` merges several, and a key written beside a merge
    overrides what it merges."""

    def construct_document(self, node: yaml.Node) -> Any:
        _check_unique_keys(self, node)
        return super().construct_document(node)


_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_NUMBER_TAGS = (_INT_TAG, _FLOAT_TAG)
_CORE_INT = re.compile(r"[-+]?[0-9]+\Z|0o[0-7]+\Z|0x[0-9a-fA-F]+\Z")
"""An integer in YAML 1.2's core schema: decimal digits (leading zeros too), octal ``0o``,
hexadecimal ``0x``."""
_CORE_FLOAT = re.compile(
    r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z"
    r"|[-+]?\.(?:inf|Inf|INF)\Z|\.(?:nan|NaN|NAN)\Z"
)
"""A float in YAML 1.2's core schema (an integer matches too: ``!!float 2``)."""


class WrittenInt(int):
    """An integer YAML read from text that Python shows otherwise (``010``, ``0x1F``,
    ``+5``), with that text, ``written``: a field that takes text refuses the number saying
    to quote it as written (:func:`written_text`), not as ``'10'``, a different value.
    Equal to, and serialised as, the plain integer; a spec's number field holds the plain
    one (pydantic converts it)."""

    written: str


class WrittenFloat(float):
    """A float YAML read from text that Python shows otherwise (``1.10``, ``1e-3``,
    ``.inf``), with that text, ``written``, as :class:`WrittenInt`."""

    written: str


def written_text(value: object) -> str:
    """How a value YAML read was written: the text of a :class:`WrittenInt` or
    :class:`WrittenFloat`, else ``str(value)``; an integer of more digits than Python
    converts to text (4,300), whose ``str`` raises ``ValueError``, by its magnitude
    (:func:`~danlu.core.values.show_number`: ``1e+5000``), as :func:`quoted` shows it."""
    written = getattr(value, "written", None)
    if isinstance(written, str):
        return written
    try:
        return str(value)
    except ValueError:
        if not isinstance(value, int):
            raise
        return show_number(value)


def type_name(value: object) -> str:
    """The name of ``value``'s type as a message shows it: ``int`` and ``float`` for a
    :class:`WrittenInt` and a :class:`WrittenFloat`, which are those to the user."""
    if isinstance(value, WrittenInt | WrittenFloat):
        return "int" if isinstance(value, int) else "float"
    return type(value).__name__


def yaml_kind(value: object) -> str:
    """What a value read from a spec's YAML (or JSON) is, in the words of its author: ``a
    list``, ``a mapping``, ``a boolean``, ``a number (1e3)`` (as written), ``text``,
    ``null``, ``a date (2024-01-01)``; a message that says what was given instead of what
    a field takes uses it (Python's ``list``, ``dict``, ``float`` or ``NoneType`` are not
    what YAML calls them). Any other value is named by :func:`type_name`."""
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return f"a number ({written_text(value)})"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, datetime.date):  # a datetime too: YAML reads 2024-01-01 as one
        return f"a date ({value})"
    return type_name(value)


def given_words(value: object) -> str:
    """What an error says was given where a field takes something else (``must be text, not
    a list ([1])``), in YAML's words, not Python's (``True``, ``None``, ``dict``): text
    quoted (``'abc'``); :func:`yaml_kind` with the value shown where the kind alone does not
    say it (``a boolean (true)``, ``a list ([1, 2])``, ``a mapping ({'a': 1})``); a number,
    a date and ``null`` as :func:`yaml_kind` says them."""
    if isinstance(value, str):
        return quoted(value)
    kind = yaml_kind(value)
    if isinstance(value, bool):
        return f"{kind} ({str(value).lower()})"
    if isinstance(value, list | tuple | dict):
        return f"{kind} ({quoted(value)})"
    return kind


@overload
def _as_written(number: int, text: str) -> int: ...
@overload
def _as_written(number: float, text: str) -> float: ...
def _as_written(number: float, text: str) -> float:
    """``number``, or, when Python shows it otherwise than ``text``, it with ``text``."""
    if str(number) == text:
        return number
    kept = WrittenInt(number) if isinstance(number, int) else WrittenFloat(number)
    kept.written = text
    return kept


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """An integer as YAML 1.2's core schema reads it: ``010`` is 10, not octal 8 (a
    :class:`WrittenInt` keeping the text)."""
    text = str(loader.construct_scalar(node))
    if not _CORE_INT.match(text):
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not an integer: write digits, 0o17 or 0x1F", node.start_mark
        )
    if text.startswith(("0o", "0x")):
        number = int(text[2:], 8 if text[1] == "o" else 16)
    else:
        number = int(text, 10)
    return _as_written(number, text)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    """A float as YAML 1.2's core schema reads it (``1e-3`` too, text to YAML 1.1)."""
    text = str(loader.construct_scalar(node))
    if not _CORE_FLOAT.match(text):
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not a number: write e.g. 1.5, 1e-3 or .inf", node.start_mark
        )
    bare = text.lower().lstrip("+-")
    special = bare in (".inf", ".nan")  # float("-inf"), float("nan")
    return _as_written(float(text.lower().replace(".", "") if special else text), text)


_BOOL_TAG = "tag:yaml.org,2002:bool"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


def _construct_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    """A boolean as the safe loader reads one (``true``, ``no``, ``on``...); other text
    given the tag (``!!bool maybe``) is a ``ConstructorError`` saying so, not PyYAML's
    ``KeyError``, which no caller took for bad YAML (a traceback from ``danlu submit``)."""
    text = str(loader.construct_scalar(node))
    if text.lower() not in yaml.SafeLoader.bool_values:
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not a boolean: write true or false", node.start_mark
        )
    return bool(yaml.SafeLoader.bool_values[text.lower()])


def _construct_timestamp(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    """A date or time as the safe loader reads one; other text given the tag
    (``!!timestamp soon``) is a ``ConstructorError`` saying so, not PyYAML's
    ``AttributeError`` (a traceback, as :func:`_construct_bool`'s ``KeyError``)."""
    text = str(loader.construct_scalar(node))
    if not yaml.SafeLoader.timestamp_regexp.match(text):
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"{text!r} is not a date or time: write e.g. 2026-12-01 or 2026-12-01T02:00:00Z",
            node.start_mark,
        )
    return yaml.SafeLoader.construct_yaml_timestamp(loader, node)


def _core_resolvers() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    """The safe loader's implicit resolvers (by a scalar's first character) with YAML 1.2's
    integer and float for YAML 1.1's, and before the rest: the first that matches wins, and
    a timestamp's comes after them as before."""
    numbers = ((_INT_TAG, _CORE_INT, "-+0123456789"), (_FLOAT_TAG, _CORE_FLOAT, "-+.0123456789"))
    safe = yaml.SafeLoader.yaml_implicit_resolvers
    out: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}
    for first in [*safe, *(char for char in "-+.0123456789" if char not in safe)]:
        core = [(tag, regexp) for tag, regexp, chars in numbers if first in chars]
        rest = [(tag, regexp) for tag, regexp in safe.get(first, []) if tag not in _NUMBER_TAGS]
        out[first] = core + rest
    return out


_SpecLoader.yaml_implicit_resolvers = _core_resolvers()
_SpecLoader.add_constructor(_INT_TAG, _construct_int)
_SpecLoader.add_constructor(_FLOAT_TAG, _construct_float)
_SpecLoader.add_constructor(_BOOL_TAG, _construct_bool)
_SpecLoader.add_constructor(_TIMESTAMP_TAG, _construct_timestamp)


def _check_unique_keys(loader: _SpecLoader, root: yaml.Node) -> None:
    """Raise :class:`SpecError` naming the first key written twice in a mapping under
    ``root``: two keys are the same when YAML reads them as equal values (``1`` and ``0x1``),
    as the mapping built from them would hold one; two merge keys ``<<`` are the same key.
    Each node is seen once (an alias shares its anchor's node, and may refer to itself)."""
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        children: list[tuple[yaml.Node, str]] = []
        if isinstance(node, yaml.SequenceNode):
            children = [
                (item, f"{path}.{i}" if path else str(i)) for i, item in enumerate(node.value)
            ]
        elif isinstance(node, yaml.MappingNode):
            lines: dict[Any, int] = {}
            merged: int | None = None  # the line of the mapping's merge key
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    children.append((value_node, path))
                    continue
                line = key_node.start_mark.line + 1
                if key_node.tag == _MERGE_TAG:  # what it merges lands in this mapping
                    if merged is not None:
                        raise _twice(path, "<<", _lines(merged, line), _MERGE_FIX)
                    merged = line
                    children.append((value_node, path))
                    continue
                key = loader.construct_object(key_node)
                if key in lines:
                    raise _twice(path, key, _lines(lines[key], line))
                lines[key] = line
                children.append((value_node, f"{path}.{key}" if path else str(key)))
        stack.extend(reversed(children))


_MERGE_FIX = "merge several mappings with one key, <<: [*first, *second]"


def _lines(first: int, line: int) -> str:
    """Where a key written twice is: `` (line 3)`` or `` (lines 3 and 4)``."""
    return f" (line {line})" if first == line else f" (lines {first} and {line})"


def load_yaml(text: str) -> Any:
    """YAML ``text`` as a job spec's file is read (:class:`_SpecLoader`: YAML 1.2's numbers,
    no key written twice, no Python objects): ``danlu submit --set`` reads its values so.
    Raises :class:`SpecError` for a key written twice, ``yaml.YAMLError`` for what is not
    YAML and ``ValueError`` for a number of thousands of digits."""
    return yaml.load(text, Loader=_SpecLoader)  # a SafeLoader: no Python objects


class _Twice(dict[str, Any]):
    """A JSON object with ``key`` written twice: marks where it is, to name its path."""

    key: str = ""


def _load_json(text: str) -> Any:
    """``json.loads``, refusing a key written twice in an object, at any depth (Python kept
    the later value) with the key's dotted path."""
    found: list[bool] = []

    def build(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        data = dict(pairs)
        if len(data) == len(pairs):
            return data
        found.append(True)
        marked = _Twice(data)
        keys: set[str] = set()
        for key, _ in pairs:
            if key in keys:
                marked.key = key
                break
            keys.add(key)
        return marked

    data = json.loads(text, object_pairs_hook=build)
    if found:
        stack: list[tuple[Any, str]] = [(data, "")]
        while stack:
            value, path = stack.pop()
            if isinstance(value, _Twice):
                raise _twice(path, value.key)
            if isinstance(value, dict | list):
                items = value.items() if isinstance(value, dict) else enumerate(value)
                stack.extend(
                    reversed([(item, f"{path}.{k}" if path else str(k)) for k, item in items])
                )
    return data
