"""The guard on values a request may carry into the store: finite numbers, integers within
64 bits, no NUL characters (PostgreSQL's text and JSON take none of the three); and the
characters a terminal acts on rather than shows, in user-chosen text printed to others
(:func:`control_character`, :func:`visible`)."""

from __future__ import annotations

import math
import numbers
import unicodedata
from collections.abc import Mapping
from typing import Any

from danlu.core.errors import SpecError

MAX_INT = 2**62
"""Largest magnitude of an integer accepted anywhere (64-bit columns stay safe)."""


def quoted(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut short: an error message quotes the input, not all of it. An
    integer of more digits than Python converts to text (``sys.get_int_max_str_digits()``,
    4,300), whose ``repr`` raises ``ValueError``, is shown by its magnitude
    (:func:`show_number`: ``1e+5000``): the error naming the field was that bare
    ``ValueError`` instead; a list or mapping holding one as ``[...]`` or ``{...}``."""
    try:
        text = repr(value)
    except ValueError:
        if isinstance(value, int):
            text = show_number(value)
        elif isinstance(value, list | tuple | dict):  # one holds such an integer
            text = {list: "[...]", tuple: "(...)"}.get(type(value), "{...}")
        else:
            raise
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plain_number_text(text: str) -> bool:
    """Whether ``text`` is written as a data file's number should be: in ASCII, without
    ``_``. Python's ``float`` also reads ``1_000`` and other scripts' digits (``\u0661``,
    Arabic-Indic one), which no measurement or trace file means."""
    return text.isascii() and "_" not in text


def plain_float(text: str) -> float:
    """``text`` as a number written plainly (:func:`plain_number_text`); ValueError for one
    that is not and for anything ``float`` refuses."""
    if not plain_number_text(text):
        raise ValueError(f"not a plain number: {text!r}")
    return float(text)


MAX_NODES = 100_000
"""The most values (numbers, strings, keys, lists, objects) one request may hold, counting a
YAML alias each time it is used: an alias bomb expands to billions."""
MAX_DEPTH = 32
"""The deepest a request's values may nest."""


def show_number(value: float) -> str:
    """A number as an error message shows it: whole ones with thousands separators
    (``2,097,152``), others as ``%g``; a huge one by its magnitude (``1e+30``), not its
    hundreds of digits."""
    if isinstance(value, int) and abs(value) >= 10**21:
        exponent = math.floor(math.log10(abs(value)))
        if 10**exponent > abs(value):  # log10 rounds 99...9 up: 10**24 - 1 is 9.99e+23
            exponent -= 1
        elif 10 ** (exponent + 1) <= abs(value):  # and may round a power of 10 down
            exponent += 1
        lead = abs(value) // 10 ** (exponent - 2)  # three leading digits
        return f"{'-' if value < 0 else ''}{lead / 100:g}e+{exponent}"
    whole = isinstance(value, int) or (math.isfinite(value) and value.is_integer())
    return f"{int(value):,}" if whole and abs(value) < 10**21 else f"{value:g}"


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, the noun with an ``s`` unless the count is one: ``1 node``,
    ``4 nodes``, ``0 GPUs`` (``1 nodes``, ``needs 1 GPUs`` were printed)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def range_message(low: float, high: float, value: float) -> str:
    """``must lie within low..high (got value)``; ``low..`` when ``high`` is infinite."""
    top = "" if high == math.inf else show_number(high)
    return f"must lie within {show_number(low)}..{top} (got {show_number(value)})"


def is_whole_number(value: Any) -> bool:
    """Whether ``value`` is an integer (a NumPy integer too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_positive_int(field: str, value: Any) -> None:
    """Raise :class:`SpecError` on ``field`` unless ``value`` is an integer >= 1 (a NumPy
    integer too; a bool, a float such as 2.5 or NaN, or a string is refused)."""
    if not is_whole_number(value) or value < 1:
        raise SpecError(field, f"must be a positive integer, got {quoted(value)}")


Limits = Mapping[str, tuple[float, float]]
"""Fields' own ranges by dotted path (``resources.gpus``: ``(0, 1048576)``)."""


def check_values(data: Any, path: str = "", limits: Limits | None = None) -> None:
    """Reject what the store cannot hold: non-finite numbers, integers beyond 2**62, NUL
    characters in strings or keys (:class:`SpecError` naming the field, ``path`` dotted);
    also more than :data:`MAX_NODES` values or nesting deeper than :data:`MAX_DEPTH`, and
    what YAML reads that JSON has no form for: binary data (``!!binary``, which pydantic
    read as text past the NUL check) and sets (``!!set``, unordered).

    An integer beyond 2**62 at a path in ``limits`` is refused with that field's own range
    (``priority: must lie within -1,000,000..1,000,000``), as a smaller one out of range is
    by the spec's checks, rather than with the store's bound."""
    _check(data, path, 0, [MAX_NODES], limits or {}, set())


def _check(
    data: Any, path: str, depth: int, budget: list[int], limits: Limits, within: set[int]
) -> None:
    """:func:`check_values` of ``data`` at ``path``; ``within``: the ids of the lists and
    mappings ``data`` lies in, for a value inside itself (a YAML alias inside its own
    anchor, ``&c [x, *c]``), refused at the alias, not where its endless nesting first
    passed :data:`MAX_DEPTH` (``command.1.1.1...``, 32 parts)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise SpecError(
            "",
            f"the request holds more than {MAX_NODES:,} values (a YAML alias counts each "
            "time it is used); send less",
        )
    if isinstance(data, bool) or data is None:
        return
    if isinstance(data, float):
        if not math.isfinite(data):
            raise SpecError(path, "must be a finite number")
    elif isinstance(data, int):
        if abs(data) > MAX_INT:
            if path in limits:
                raise SpecError(path, range_message(*limits[path], data))
            raise SpecError(path, f"must be between -2**62 and 2**62 (got {quoted(data)})")
    elif isinstance(data, str):
        check_text(data, path)
    elif isinstance(data, bytes | bytearray):
        raise SpecError(path or "body", _BINARY)
    elif isinstance(data, set | frozenset):
        raise SpecError(
            path or "body",
            "is a set (YAML's !!set), which keeps no order: write a list, [a, b]",
        )
    elif isinstance(data, dict | list | tuple) and id(data) in within:
        raise SpecError(
            path or "body",
            "refers to itself (a YAML alias inside its own anchor, as in &a [x, *a]), a "
            "value without end: write it out, or alias a value outside the anchor",
        )
    elif isinstance(data, dict | list | tuple) and depth >= MAX_DEPTH:
        raise SpecError(path or "body", f"nests deeper than {MAX_DEPTH} levels")
    elif isinstance(data, dict | list | tuple):
        within.add(id(data))
        if isinstance(data, dict):
            for key, value in data.items():
                sub = f"{path}.{key}" if path else str(key)
                if isinstance(key, bytes | bytearray):
                    raise SpecError(path or "body", f"a key {_BINARY}")
                check_text(str(key), path or "body", "keys")
                _check(value, sub, depth + 1, budget, limits, within)
        else:
            for i, value in enumerate(data):
                sub = f"{path}.{i}" if path else str(i)
                _check(value, sub, depth + 1, budget, limits, within)
        within.discard(id(data))


_BINARY = "is binary data (YAML's !!binary), which no field takes: write it as text"
"""Why bytes are refused: pydantic read them as text, past :func:`check_text`'s NUL check."""


def check_text(text: str, path: str, what: str = "") -> None:
    """``text`` must hold no NUL (PostgreSQL cannot store one) and be valid Unicode: a lone
    UTF-16 surrogate (``"\\ud800"`` in JSON) was stored, and every response listing the
    row then failed to encode it (a 500 for every user's job list)."""
    subject = f"{what} " if what else ""
    if "\0" in text:
        raise SpecError(path, f"{subject}must not contain NUL characters")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise SpecError(
                path, f"{subject}must be valid Unicode (no lone surrogate characters)"
            ) from None


CONTROL_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})
"""Unicode categories of characters a terminal acts on rather than shows: the C0 and C1
controls (line breaks, tab, ESC, CSI, DEL, NUL) and the line and paragraph separators."""
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
"""The bidirectional formatting characters (marks, embeddings, overrides, isolates), which
reorder what a terminal shows after them (``safe\\u202etxt.exe`` reads ``safeexe.txt``)."""
_UNSHOWN = CONTROL_CATEGORIES | {"Cs"}
"""What :func:`visible` escapes: the controls, and lone surrogates (no output encodes one)."""


def control_character(text: str) -> str | None:
    """The first character of ``text`` that a terminal would act on rather than show (of
    :data:`CONTROL_CATEGORIES` or :data:`BIDI_CONTROLS`), or None. The API refuses a metric
    name or an API token's label holding one: both are chosen by any user and printed in an
    admin's tables."""
    if text.isprintable():  # the common case: no control, separator or format character
        return None
    for char in text:
        if char in BIDI_CONTROLS or unicodedata.category(char) in CONTROL_CATEGORIES:
            return char
    return None


def controls_replaced(text: str, keep: str = "") -> str:
    """``text`` with each C0 or C1 control character (category ``Cc``) but those in ``keep``
    written as ``?``: for text a program or a user's model printed that becomes a stored
    reason (a NUL, which PostgreSQL's text cannot hold, failed its write; a terminal's
    escape sequences would reach whoever lists it)."""
    return "".join("?" if unicodedata.category(c) == "Cc" and c not in keep else c for c in text)


def visible(text: str) -> str:
    """``text`` as a terminal may print it: each :func:`control_character` and lone
    surrogate written as its Python escape (``\\x1b``, ``\\n``, ``\\u202e``), the rest as
    it is. For names and values stored before the API refused them, and for string values,
    which may hold them."""
    if text.isprintable():
        return text
    return "".join(
        repr(char)[1:-1]
        if char in BIDI_CONTROLS or unicodedata.category(char) in _UNSHOWN
        else char
        for char in text
    )
