"""The checks on one training metric record, shared by the API, which refuses a batch holding
a record that fails them (422 naming ``metrics.<i>``), and by danlu.train's reporter, which
leaves such a record out before it sends, so that the others of its request are stored.

A record is a JSON object with an integer ``step`` (0..2**62), an optional ``time`` (POSIX
seconds; null is absent: the time it is checked) and flat values: numbers (integers within
2**62; NaN and infinities become null), strings and names without NUL or lone surrogates,
booleans and null; at most :data:`MAX_RECORD_BYTES` of JSON besides ``step`` and ``time``. A
``checkpoint_step`` value that is a number is a whole one within 0..2**62 (``7.0`` is read
as 7). A name holds no control character (:func:`control_character`): an admin's ``danlu
metrics`` prints the names a job's owner chose, and an ESC sequence or a line break there
would act on the admin's terminal (a string value may hold them: tables show them as
escapes, :func:`visible`).

An integer written with more digits than Python converts from text
(``sys.get_int_max_str_digits()``, 4,300 by default) is read by :func:`parse_json`, the API's
parser of a metrics request, as a :class:`LongInteger` (``json.loads`` raises on it): refused
here as any integer out of range, naming its field."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from danlu.core.errors import SpecError
from danlu.core.values import MAX_INT, check_text, control_character, quoted

MAX_RECORD_BYTES = 16_384
"""The most JSON one record's values (``step`` and ``time`` aside) may take."""

MAX_TIME = 253_402_300_800.0
"""A record's ``time`` is below this: 10000-01-01 in POSIX seconds (a time in milliseconds or
nanoseconds is far past it, and no clock formats a later year)."""

VALUE_TYPES = "metric values must be numbers, strings, booleans or null"

_NAME_FAULT = (
    "metric names must not contain control characters (line breaks, tabs, ESC sequences, "
    "bidirectional overrides)"
)
_NAME_FIX = "rename the metric without them"
_INT_RANGE = "must be between -2**62 and 2**62"
_INT_FIX = "send a larger one as a float"


class RecordError(SpecError):
    """A metric record the API refuses: ``field`` and ``message`` as for any
    :class:`SpecError`, and ``reason``, the fault without the value it quotes (every record
    with a time in milliseconds has the same ``reason``: a reporter warns once for all)."""

    def __init__(self, field: str, message: str, reason: str | None = None) -> None:
        super().__init__(field, message)
        self.reason = message if reason is None else reason


@dataclass(frozen=True)
class LongInteger:
    """An integer of more digits than Python converts to or from text
    (``sys.get_int_max_str_digits()``): :func:`parse_json`'s reading of one, which ``int()``
    refuses, and how a message shows one (its ``repr`` raises). Its length, not its value:
    no record can hold it."""

    digits: int
    negative: bool = False

    @classmethod
    def of(cls, value: int) -> LongInteger:
        """``value``'s length, counted without converting it to text."""
        size = abs(value)
        digits = math.floor(math.log10(size)) + 1 if size else 1
        if digits > 1 and 10 ** (digits - 1) > size:  # log10 rounded up at 99...9
            digits -= 1
        return cls(digits, negative=value < 0)

    def __str__(self) -> str:
        return f"an integer of {self.digits:,} digits"


def parse_json(text: str | bytes) -> Any:
    """``text`` as :func:`json.loads` reads it, but an integer of more digits than Python
    converts is a :class:`LongInteger` instead of a ``ValueError`` for the whole text: the
    record holding it is refused naming its field (:func:`check_record`)."""
    return json.loads(text, parse_int=_integer)


def _integer(digits: str) -> int | LongInteger:
    try:
        return int(digits)
    except ValueError:  # past sys.get_int_max_str_digits(): JSON's digits are well formed
        return LongInteger(len(digits.lstrip("-")), negative=digits.startswith("-"))


@dataclass(frozen=True)
class MetricRecord:
    """A record as stored: its step, its time and its other values (NaN as null)."""

    step: int
    time: float
    data: dict[str, Any]


def _at(where: str, name: str) -> str:
    """The dotted field ``name`` of the record at ``where`` (``""``: the record itself)."""
    return f"{where}.{name}" if where else name


RECORD_FIELDS = ("step", "time")
"""A record's own fields, kept apart from the values it reports."""


def check_record(record: Any, where: str, now: float) -> MetricRecord:
    """``record`` as stored (``time`` absent or null: ``now``), or :class:`RecordError` naming
    the first field that fails (``where``, say ``metrics.5``, prefixes the field; a fault of
    the whole record names ``where`` itself). The checks run in a fixed order (step, time,
    names, values, size, checkpoint step), so the API and the reporter name the same one."""
    if not isinstance(record, Mapping):
        raise RecordError(where, "each metric record must be an object")
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_INT:
        raise RecordError(_at(where, "step"), f"an integer step in 0..{MAX_INT} is required")
    given_time = record.get("time")
    when = _seconds(now if given_time is None else given_time, _at(where, "time"))
    for key in record:
        check_metric_name(str(key), where)
    data = {
        str(k): _clean(v, _at(where, str(k))) for k, v in record.items() if k not in RECORD_FIELDS
    }
    if len(json.dumps(data)) > MAX_RECORD_BYTES:
        raise RecordError(where, f"a record may hold at most {MAX_RECORD_BYTES} bytes of JSON")
    ckpt = data.get("checkpoint_step")
    if isinstance(ckpt, float) and ckpt.is_integer() and 0 <= ckpt <= MAX_INT:
        # JSON has one number type: 7.0 is step 7 (stored so, and counted as the job's last
        # checkpoint; it was stored as 7.0 and not counted)
        data["checkpoint_step"] = ckpt = int(ckpt)
    number = isinstance(ckpt, (int, float)) and not isinstance(ckpt, bool)
    if number and (not isinstance(ckpt, int) or not 0 <= ckpt <= MAX_INT):
        raise RecordError(
            _at(where, "checkpoint_step"),
            f"{ckpt!r} is not a step: send the checkpoint's step, a whole number within "
            f"0..{MAX_INT}",
        )
    return MetricRecord(step, when, data)


def check_metric_name(name: str, where: str) -> None:
    """Refuse, as a :class:`RecordError` naming ``where``, a metric name no record may
    hold: one with a control character (NUL too, before check_text's message) or text
    :func:`~danlu.core.values.check_text` refuses (a lone surrogate, say)."""
    if control_character(name) is not None:
        raise RecordError(
            where,
            f"{_NAME_FAULT}, got {quoted(name)}: {_NAME_FIX}",
            f"{_NAME_FAULT}: {_NAME_FIX}",
        )
    _text(name, where, "metric names")


def _text(text: str, field: str, what: str = "") -> None:
    """:func:`~danlu.core.values.check_text`, its :class:`SpecError` as a
    :class:`RecordError`."""
    try:
        check_text(text, field, what)
    except SpecError as exc:
        raise RecordError(exc.field, exc.message) from None


def _clean(value: Any, field: str) -> Any:
    """One metric value as stored: NaN and infinities become null (a diverged loss is still
    a record, and the rest of its batch is kept); what the store cannot hold is an error."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        _text(value, field)
        return value
    if isinstance(value, int | LongInteger):
        if isinstance(value, LongInteger) or abs(value) > MAX_INT:
            raise RecordError(
                field,
                f"{_INT_RANGE} (got {_shown(value)}): {_INT_FIX}",
                f"{_INT_RANGE}: {_INT_FIX}",
            )
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None  # NaN / inf are not JSON: store null (the anomaly is the point)
        return value
    raise RecordError(field, VALUE_TYPES)


def _shown(value: int | LongInteger) -> str:
    """An integer as a message quotes it: its digits, cut short, or its length when it has
    more than Python converts to text."""
    if isinstance(value, int):
        try:
            repr(value)
        except ValueError:  # repr() refuses it (quoted() would show its magnitude)
            return str(LongInteger.of(value))
        return quoted(value)
    return str(value)


def _seconds(value: Any, field: str) -> float:
    """A record's ``time`` as a float; :class:`RecordError` naming ``field`` for anything but
    a number of POSIX seconds from 0 to the year 9999 (a time in milliseconds or nanoseconds,
    ``time.time_ns()``, is refused: it reads as a date thousands of years away)."""
    if isinstance(value, LongInteger):
        seconds = math.inf
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(field, "must be a number of POSIX seconds")
    else:
        try:
            seconds = float(value)
        except OverflowError:  # an integer past ~1.8e308
            seconds = math.inf
    if not 0.0 <= seconds < MAX_TIME:  # NaN too
        big = isinstance(value, int | LongInteger) and math.isinf(seconds)
        shown = "an integer beyond 1e308" if big else quoted(value)
        hint = "send time.time(), not milliseconds or nanoseconds"
        span = f"must be POSIX seconds from 0 to {MAX_TIME:.0f} (the year 9999)"
        raise RecordError(field, f"{span}, got {shown}: {hint}", f"{span}: {hint}")
    return seconds
