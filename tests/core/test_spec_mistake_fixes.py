"""Plausible mistakes in a job spec's YAML get an error that says the fix, not only what
the reader met:

- a tab where YAML takes spaces (an editor that indents with tabs): PyYAML said "found
  character '\\t' that cannot start any token" and no more;
- a nested mapping written on the key's line (``resources: gpus: 1``): "mapping values are
  not allowed here";
- a key indented unlike its siblings: "expected <block end>, but found '<block mapping
  start>'";
- text where a number goes (``cpus: 4 cores``, ``priority: high``, ``gpu_fraction: 50%``):
  pydantic's "Input should be a valid number, unable to parse string as a number", without
  the value or what to write; a fraction where a whole number goes likewise;
- a mapping where a list goes (``command: {python: train.py}``): "Input should be a valid
  list";
- a YAML alias inside its own anchor (``command: &c [x, *c]``), an endless value: it was
  refused as nesting deeper than 32 levels at a field of 32 repeated parts
  (``command.1.1.1...``), naming no field the user wrote.

What was accepted reads as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import load_spec, loads_spec
from danlu.core.spec_text import parse_text
from danlu.core.sweep import parse_sweep
from danlu.core.values import check_values

BASE = "name: a\ncommand: [x]\n"


def _refused(text: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        loads_spec(text)
    return caught.value


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (BASE + "resources:\n\tgpus: 1\n", 4),
        (BASE + "resources:\n  gpus: 1\n\tgpu_memory: 1GiB\n", 5),
        ("name:\ta\ncommand: [x]\n", 1),
    ],
)
def test_a_tab_says_to_indent_with_spaces(text: str, line: int, tmp_path: Path) -> None:
    error = _refused(text)
    assert "not valid YAML" in error.message
    assert f"YAML indents with spaces, never tabs: replace the tab on line {line}" in error.message
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match="YAML indents with spaces"):
        load_spec(path)


@pytest.mark.parametrize(
    "text",
    [BASE + "resources: gpus: 1\n", "name: my job: v2\ncommand: [x]\n", "name:a\n" + BASE[8:]],
)
def test_a_mapping_on_its_keys_line_says_where_it_goes(text: str) -> None:
    """``resources: gpus: 1``, ``name: my job: v2`` and ``name:a`` (no space: the key's
    text runs on into the next line's key) are all "mapping values are not allowed here"."""
    error = _refused(text)
    assert "mapping values are not allowed here" in error.message  # PyYAML's words kept
    assert "on the lines below its key, indented, or in braces" in error.message
    assert "quote a value that holds ': '" in error.message
    assert "(name: a, not name:a)" in error.message


def test_a_key_indented_unlike_its_siblings_says_so() -> None:
    error = _refused(BASE + "resources:\n    gpus: 1\n  gpu_memory: 1GiB\n")
    assert "indent every key of one mapping alike" in error.message
    assert "line 5" in error.message


@pytest.mark.parametrize(
    ("line", "field", "shown", "fix"),
    [
        ("resources: {cpus: 4 cores}", "resources.cpus", "'4 cores'", "write a number"),
        ("resources: {gpu_fraction: 50%}", "resources.gpu_fraction", "'50%'", "write a number"),
        ("priority: high", "priority", "'high'", "write a whole number"),
        ("max_restarts: three", "max_restarts", "'three'", "write a whole number"),
        (
            "training: {global_batch_size: 32.5}",
            "training.global_batch_size",
            "32.5",
            "write a whole number",
        ),
    ],
)
def test_text_where_a_number_goes_shows_it_and_the_fix(
    line: str, field: str, shown: str, fix: str
) -> None:
    error = _refused(BASE + line)
    assert error.field == field
    assert error.message.startswith(f"{shown} is not ")
    assert fix in error.message
    assert "Input should be" not in error.message  # pydantic's words, without the value


def test_a_mapping_where_a_list_goes_says_to_write_a_list() -> None:
    error = _refused("name: a\ncommand: {python: train.py}\n")
    assert error.field == "command"
    assert (
        "must be a list, e.g. [first, second], not a mapping ({'python': 'train.py'})"
        in error.message
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name: a\ncommand: &c [x, *c]\n", "command.1"),
        (BASE + "env: &e {A: *e}\n", "env.A"),
        (BASE + "resources: &r {gpus: 1, gpu_type: [*r]}\n", "resources.gpu_type.0"),
    ],
)
def test_an_alias_inside_its_own_anchor_names_where_it_is(text: str, field: str) -> None:
    error = _refused(text)
    assert error.field == field
    assert "refers to itself" in error.message
    assert "nests deeper" not in error.message


def test_a_self_referring_value_is_refused_by_check_values_too() -> None:
    looped: list[object] = ["x"]
    looped.append(looped)
    with pytest.raises(SpecError, match="refers to itself") as caught:
        check_values({"command": looped})
    assert caught.value.field == "command.1"


def test_shared_aliases_and_what_was_accepted_read_as_before() -> None:
    text = (
        "name: a\ncommand: &c [python, train.py]\n"
        "env: {A: &v x, B: *v}\n"
        "resources: &r {gpus: 2, gpu_type: [a100, a100]}\n"
        "training: {global_batch_size: '32'}\n"
    )
    spec = loads_spec(text)
    assert spec.env == {"A": "x", "B": "x"}
    assert spec.resources.gpus.min == 2
    assert spec.training.global_batch_size == 32
    shared = ["x"]
    check_values({"a": shared, "b": shared, "c": [shared, shared]})  # shared, not looped
    spec = loads_spec(BASE + "resources: {cpus: '4'}\npriority: '5'\n")
    assert (spec.resources.cpus, spec.priority) == (4.0, 5)


SWEEP = "name: s\ntrial: {command: [x]}\n"


@pytest.mark.parametrize(
    ("lines", "field", "says"),
    [
        (
            "parameters: {lr: {distribution: uniform, low: small, high: 1}}\ntrials: 3",
            "parameters.lr.low",
            "must be a number, not 'small'",
        ),
        (
            "parameters: {lr: {values: [[1, 2]]}}\nmethod: grid",
            "parameters.lr.values.0",
            "must be text, a number or a boolean, not a list ([1, 2])",
        ),
        (
            "parameters: {lr: {values: [{a: 1}]}}\nmethod: grid",
            "parameters.lr.values.0",
            "must be text, a number or a boolean, not a mapping ({'a': 1})",
        ),
    ],
)
def test_a_value_no_member_of_its_union_takes_is_named_by_its_field(
    lines: str, field: str, says: str
) -> None:
    """pydantic reports a value that fits none of a union's types once per type, each at
    the field with the type's name added (``parameters.lr.low.int``, then ``...low.float``):
    the error named a field no spec has and said only the first type."""
    with pytest.raises(SpecError) as caught:
        parse_sweep(parse_text(SWEEP + lines, False))
    assert caught.value.field == field
    assert caught.value.message == says


def test_a_key_read_as_a_number_in_a_sweeps_parameters_says_to_quote_it() -> None:
    """``parameters: {1: ...}``: pydantic said "Input should be a valid string" at
    ``parameters.1.[key]``."""
    with pytest.raises(SpecError) as caught:
        parse_sweep(parse_text(SWEEP + "parameters: {1: {values: [1]}}\nmethod: grid", False))
    assert caught.value.field == "parameters.1"
    assert "a key YAML read as a number (1)" in caught.value.message
    assert "quote it, '1'" in caught.value.message


def test_errors_at_sibling_keys_keep_their_own_fields() -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec(BASE + "env: {A: 1, B: 1}\n")
    assert caught.value.field == "env.A"
    spec = parse_sweep(
        parse_text(SWEEP + "parameters: {lr: {values: [a, 1, 2.5, true]}}\nmethod: grid", False)
    )
    assert spec.parameters["lr"].values == ["a", 1, 2.5, True]


@pytest.mark.parametrize(
    ("line", "field", "top"),
    [
        ("resources: {memory: 99999999999999999999999}", "resources.memory", "4,611,686,018,427"),
        ("resources: {gpu_memory: 99999999999999999999999}", "resources.gpu_memory", "4,611,686"),
        ("deadline: 99999999999999999999999", "deadline", "3,155,760,000"),
        ("time_limit: 99999999999999999999999", "time_limit", "3,155,760,000"),
        (
            "training: {expected_duration: 99999999999999999999999}",
            "training.expected_duration",
            "3,155,760,000",
        ),
    ],
)
def test_an_integer_past_the_store_gets_its_fields_own_range(
    line: str, field: str, top: str
) -> None:
    """A size or duration beyond 2**62 was refused with the store's bound, "must be between
    -2**62 and 2**62", a range that lets a size be negative; a smaller one out of range gets
    the field's own range, and so does this one now."""
    error = _refused(BASE + line)
    assert error.field == field
    assert error.message.startswith("must lie within 0.." + top), error.message
    assert "2**62" not in error.message
    sweep = f"name: s\ntrial: {{command: [x], {line}}}\nparameters: {{lr: {{values: [1]}}}}"
    with pytest.raises(SpecError) as caught:
        parse_sweep(parse_text(sweep + "\nmethod: grid", False))
    assert caught.value.field == f"trial.{field}"
    assert caught.value.message.startswith("must lie within 0.." + top)


@pytest.mark.parametrize(
    ("line", "field", "meant"),
    [
        ("Priority: 1", "Priority", "priority"),
        ("resources: {gpu-memory: 20GiB}", "resources.gpu-memory", "resources.gpu_memory"),
        ("resources: {GPUs: 2}", "resources.GPUs", "resources.gpus"),
        (
            "training: {global-batch-size: 64}",
            "training.global-batch-size",
            "training.global_batch_size",
        ),
        ("max_restart: 2", "max_restart", "max_restarts"),
        ("resources: {gpu_memroy: 20GiB}", "resources.gpu_memroy", "resources.gpu_memory"),
    ],
)
def test_a_field_spelt_nearly_right_names_the_one_meant(line: str, field: str, meant: str) -> None:
    """``Priority``, ``gpu-memory``, ``max_restart``: "unknown field; check the spelling"
    left the user to find which letter was wrong."""
    error = _refused(BASE + line)
    assert error.field == field
    assert error.message.startswith(f"unknown field; did you mean {meant}?"), error.message


def test_a_field_spelt_right_in_the_wrong_section_still_names_its_place() -> None:
    error = _refused(BASE + "GPUs: 2\n")
    assert error.field == "GPUs"
    assert "write it as resources.gpus" in error.message


@pytest.mark.parametrize(
    ("lines", "field"),
    [
        ("parameters: [lr, wd]\nmethod: grid", "parameters"),
        ("parameters: {lr: [0.1, 0.2]}\nmethod: grid", "parameters.lr"),
    ],
)
def test_a_list_where_a_sweep_takes_a_mapping_says_to_write_one(lines: str, field: str) -> None:
    """``parameters: [lr, wd]``: pydantic said "Input should be a valid dictionary", not
    what to write (a parameter that is a list said so already, and still does)."""
    with pytest.raises(SpecError) as caught:
        parse_sweep(parse_text(SWEEP + lines, False))
    assert caught.value.field == field
    assert caught.value.message.startswith("must be a mapping"), caught.value.message
    assert "Input should be" not in caught.value.message
