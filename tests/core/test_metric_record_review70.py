"""An integer of more digits than Python converts to or from text (4,300 by
default, ``sys.get_int_max_str_digits``) in a metric record. The API's JSON parser tripped on
it (a 400 instead of the 422 naming the field), and the checks quoted the value it refused
(``repr`` of such an integer raises ``ValueError``, not the :class:`RecordError` the reporter
leaves a record out for)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from danlu.core.metric_record import LongInteger, RecordError, check_record, parse_json

LIMIT = 4300
DIGITS = LIMIT + 1


@pytest.fixture(autouse=True)
def _default_limit() -> Iterator[None]:
    """Python's default limit, whatever ``PYTHONINTMAXSTRDIGITS`` says."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(LIMIT)
    yield
    sys.set_int_max_str_digits(before)


@pytest.mark.parametrize("name", ["tokens", "checkpoint_step"])
def test_a_python_integer_too_long_to_print_is_refused_naming_its_field(name: str) -> None:
    with pytest.raises(RecordError) as refused:
        check_record({"step": 1, name: -(10 ** (DIGITS - 1))}, "metrics.3", 0.0)
    assert refused.value.field == f"metrics.3.{name}"
    assert "between -2**62 and 2**62" in refused.value.message
    assert f"{DIGITS:,} digits" in refused.value.message
    assert refused.value.reason == "must be between -2**62 and 2**62: send a larger one as a float"


def test_the_parser_keeps_such_an_integer_as_its_length() -> None:
    text = f'{{"metrics": [{{"step": 1, "a": -{"9" * DIGITS}, "b": 12}}]}}'
    record = parse_json(text.encode())["metrics"][0]
    assert record["a"] == LongInteger(DIGITS, negative=True) and record["b"] == 12
    with pytest.raises(RecordError) as refused:
        check_record(record, "metrics.0", 0.0)
    assert refused.value.field == "metrics.0.a"
    assert f"an integer of {DIGITS:,} digits" in refused.value.message


@pytest.mark.parametrize(("name", "says"), [("step", "integer step"), ("time", "time.time()")])
def test_a_step_or_time_of_that_length_is_refused_naming_it(name: str, says: str) -> None:
    record = parse_json(f'{{"step": 1, "{name}": {"1" * DIGITS}}}')
    with pytest.raises(RecordError) as refused:
        check_record(record, "metrics.0", 0.0)
    assert refused.value.field == f"metrics.0.{name}"
    assert says in refused.value.message


def test_ordinary_json_reads_as_json_does() -> None:
    text = f'{{"a": [1, -2, 3.5, 1e400, "x", null, true], "b": {{"c": {"7" * 4000}}}}}'
    assert parse_json(text) == {
        "a": [1, -2, 3.5, float("inf"), "x", None, True],
        "b": {"c": int("7" * 4000)},
    }
