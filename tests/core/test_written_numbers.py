"""A number YAML read where text goes is refused saying to quote it, and the quoted text the
error suggests is the text as written: ``VERSION: 1.10`` was told to write ``'1.1'``,
``--mask 0x1F`` ``'31'`` and ``name: 007`` ``'7'``, each a different value from the one
meant. The numbers themselves still read as the numbers they write."""

from __future__ import annotations

import json
import pickle

import pytest

from danlu.core.errors import SpecError
from danlu.core.job_array import parse_array
from danlu.core.spec import loads_spec
from danlu.core.spec_text import load_yaml
from danlu.core.sweep import parse_sweep

BASE = "name: a\ncommand: [x]\n"


@pytest.mark.parametrize(
    ("text", "field", "suggested"),
    [
        (BASE + "env: {VERSION: 1.10}", "env.VERSION", "'1.10'"),
        (BASE + "env: {ZIP: 02134}", "env.ZIP", "'02134'"),
        (BASE + "env: {RATE: 1e-3}", "env.RATE", "'1e-3'"),
        (BASE + "env: {010: a}", "env", "'010'"),
        ("name: a\ncommand: [x, --mask, 0x1F]", "command.2", "'0x1F'"),
        ("name: 007\ncommand: [x]", "name", "name: '007'"),
        (BASE + "project: +5", "project", "project: '+5'"),
        (BASE + "resources: {gpu_type: 0o17}", "resources.gpu_type", "gpu_type: '0o17'"),
        (BASE + "depends_on: 000123456789", "depends_on.0.job", "000123456789 was read"),
    ],
)
def test_the_quoting_suggested_is_of_the_text_written(
    text: str, field: str, suggested: str
) -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec(text)
    assert caught.value.field == field
    assert suggested in caught.value.message


def test_a_number_written_as_python_shows_it_is_suggested_as_before() -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec("name: 2024\ncommand: [x]")
    assert "name: '2024'" in caught.value.message


def test_numbers_read_as_the_numbers_they_write() -> None:
    data = load_yaml("a: 010\nb: 1.50\nc: 0x1F\nd: [+5, .inf]\n")
    assert data == {"a": 10, "b": 1.5, "c": 31, "d": [5, float("inf")]}
    assert json.dumps(data) == '{"a": 10, "b": 1.5, "c": 31, "d": [5, Infinity]}'
    assert pickle.loads(pickle.dumps(data)) == data
    spec = loads_spec(BASE + "priority: 010\nresources: {cpus: 1.50}")
    assert type(spec.priority) is int and spec.priority == 10
    assert type(spec.resources.cpus) is float and spec.resources.cpus == 1.5


def test_a_number_kept_as_written_is_named_by_its_plain_type() -> None:
    with pytest.raises(
        SpecError, match=r"a job spec must be a mapping of fields, got a number \(010\)$"
    ):
        loads_spec("010")
    with pytest.raises(
        SpecError, match=r"a sweep spec must be a mapping of fields, got a number \(1e3\)$"
    ):
        parse_sweep(load_yaml("1e3"))
    with pytest.raises(SpecError, match=r"got a number \(1e3\): write it as text"):
        parse_array(load_yaml("1e3"))
    with pytest.raises(SpecError, match=r"a key YAML read as a number \(0x1\)") as caught:
        loads_spec("name: a\ncommand: [x]\n0x1: 2\n")
    assert caught.value.field == ""
