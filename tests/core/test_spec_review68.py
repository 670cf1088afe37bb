"""The job spec: YAML numbers read as YAML 1.2's core schema reads them (no
sexagesimal ``1:00:00:00``, no octal ``010``: the same text means the same quoted or not, in
a file or in ``--set``), a second ``<<`` merge key in one mapping refused as any key written
twice, and a global batch outside ``min_batch_size..max_batch_size`` refused at submission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from danlu.cli.spec_build import build_spec
from danlu.core.errors import SpecError
from danlu.core.job_array import parse_array
from danlu.core.spec import load_spec_data, loads_spec, parse_spec
from danlu.core.spec_text import load_yaml

BASE = 'name: t\ncommand: ["true"]\n'


def _outcome(text: str) -> Any:
    """The spec ``BASE + text`` validated, as its JSON form, or the error's field and
    message."""
    try:
        return loads_spec(BASE + text).model_dump(mode="json")
    except SpecError as exc:
        return ("error", exc.field, exc.message)


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("time_limit", "1:00:00:00"),  # was 216000 s (60 h), sexagesimal; quoted: refused
        ("time_limit", "4:00:00"),
        ("time_limit", "90:00"),
        ("time_limit", "1:00:00:00.5"),  # a sexagesimal float
        ("time_limit", "1e3"),  # a YAML 1.2 float, a string to YAML 1.1
        ("deadline", "2:30:00"),
        ("priority", "010"),  # was octal 8
        ("priority", "-010"),
        ("priority", "1_000"),
        ("max_restarts", "0:10"),  # was 10, sexagesimal
        ("max_restarts", "07"),
        ("resources.gpus", "1:4"),  # a typo for 1..4: was 64 GPUs
        ("resources.gpus", "010"),
        ("training.global_batch_size", "0100"),
        ("training.expected_duration", "1:30:00"),
    ],
    ids=lambda value: str(value),
)
def test_a_value_means_the_same_quoted_or_not(field: str, text: str) -> None:
    *parents, last = field.split(".")
    indent = "".join(f"{'  ' * depth}{name}:\n" for depth, name in enumerate(parents))
    pad = "  " * len(parents)
    plain = _outcome(f"{indent}{pad}{last}: {text}\n")
    quoted = _outcome(f'{indent}{pad}{last}: "{text}"\n')
    assert plain == quoted


def test_four_clock_fields_are_not_a_duration_but_say_how_to_write_days() -> None:
    with pytest.raises(SpecError, match="1-00:00:00") as err:
        loads_spec(BASE + "time_limit: 1:00:00:00\n")
    assert err.value.field == "time_limit"


def test_leading_zeros_are_decimal_and_colons_are_no_numbers() -> None:
    spec = loads_spec(BASE + "priority: 010\nmax_restarts: 007\n")
    assert (spec.priority, spec.max_restarts) == (10, 7)
    with pytest.raises(SpecError, match="not a GPU count") as err:
        loads_spec(BASE + "resources: {gpus: 1:4}\n")
    assert err.value.field == "resources.gpus"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0o17", 15),  # YAML 1.2's octal
        ("0x1F", 31),
        ("+12", 12),
        ("-0", 0),
        ("!!int 010", 10),
        ('!!int "7"', 7),
    ],
    ids=["octal-0o", "hex", "plus", "minus-zero", "tag-leading-zero", "tag-quoted"],
)
def test_yaml_12_integers(tmp_path: Path, text: str, value: int) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(f"{BASE}priority: {text}\n")
    assert load_spec_data(path)["priority"] == value


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e3", 1000.0), ("1.5E-1", 0.15), (".5", 0.5), ("2.", 2.0), ("-.inf", float("-inf"))],
    ids=["exponent", "exponent-upper", "leading-point", "trailing-point", "minus-inf"],
)
def test_yaml_12_floats(tmp_path: Path, text: str, value: float) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(f"{BASE}x: {text}\n")
    assert load_spec_data(path)["x"] == value


@pytest.mark.parametrize("text", ["1:00", "1_000", "0b101", "0o8", "1:00:00.5"], ids=lambda t: t)
def test_yaml_11_only_forms_are_text(tmp_path: Path, text: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(f"{BASE}x: {text}\n")
    assert load_spec_data(path)["x"] == text


def test_a_tagged_number_that_is_none_is_refused() -> None:
    with pytest.raises(SpecError, match="not valid YAML"):
        loads_spec(BASE + "priority: !!int 1:00\n")


def _spec_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(BASE + text)
    return path


def test_the_array_and_priority_of_a_file_read_010_as_ten(tmp_path: Path) -> None:
    body = build_spec(_spec_file(tmp_path, "array: 010\npriority: 010\n"), {}, [])
    # the array as the file gives it, read by parse_array as danlu submit reads it
    assert (parse_array(body["array"]).indices, body["priority"]) == ((10,), 10)


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ("time_limit=1:00:00:00", "time_limit"),
        ("resources.gpus=1:4", "resources.gpus"),
        ("max_restarts=0:10", "max_restarts"),
    ],
    ids=["time-limit", "gpus", "max-restarts"],
)
def test_set_reads_the_text_as_the_file_does(tmp_path: Path, item: str, field: str) -> None:
    with pytest.raises(SpecError) as err:
        build_spec(_spec_file(tmp_path, ""), {}, [item])
    assert err.value.field == field


def test_set_priority_010_is_ten_and_a_time_given_whole_is_read_as_text(tmp_path: Path) -> None:
    body = build_spec(_spec_file(tmp_path, ""), {}, ["priority=010", "time_limit=4:00:00"])
    assert (body["priority"], body["time_limit"]) == (10, 14400.0)


def test_set_refuses_a_key_written_twice_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="written twice") as err:
        build_spec(_spec_file(tmp_path, ""), {}, ["resources={gpus: 1, gpus: 2}"])
    assert err.value.field == "resources.gpus"


# -- merge keys --------------------------------------------------------------------------


def test_two_merge_keys_in_one_mapping_are_refused() -> None:
    with pytest.raises(SpecError, match=r"written twice \(lines 3 and 4\)") as err:
        loads_spec(BASE + "<<: {priority: 1}\n<<: {priority: 2}\n")
    assert err.value.field == "<<"


def test_two_merge_keys_in_a_nested_mapping_name_its_path() -> None:
    text = "a: &a {gpus: 1}\nb: &b {gpus: 2}\nresources:\n  <<: *a\n  <<: *b\n"
    with pytest.raises(SpecError, match="written twice") as err:
        loads_spec(BASE + text)
    assert err.value.field == "resources.<<"


def test_one_merge_key_with_a_list_merges_several_and_keys_still_override() -> None:
    text = "x: &a {priority: 1}\ny: &b {project: p1, priority: 5}\n<<: [*a, *b]\nmax_restarts: 2\n"
    data = _yaml(text)
    assert (data["priority"], data["project"], data["max_restarts"]) == (1, "p1", 2)
    one = _yaml("x: &c {priority: 3}\n<<: *c\npriority: 4\n")
    assert one["priority"] == 4


def _yaml(text: str) -> Any:
    return load_yaml(BASE + text)


# -- batch sizes ------------------------------------------------------------------------


def _training(**hints: int) -> dict[str, Any]:
    return {"name": "mb", "command": ["true"], "resources": {"gpus": "1..4"}, "training": hints}


def test_a_global_batch_above_the_largest_is_refused_naming_both() -> None:
    with pytest.raises(SpecError, match=r"training\.max_batch_size") as err:
        parse_spec(_training(global_batch_size=256, max_batch_size=64))
    assert err.value.field == "training.global_batch_size"
    assert "256" in err.value.message and "64" in err.value.message


def test_a_global_batch_below_the_smallest_is_refused_naming_both() -> None:
    with pytest.raises(SpecError, match=r"training\.min_batch_size") as err:
        parse_spec(_training(global_batch_size=16, min_batch_size=32))
    assert err.value.field == "training.global_batch_size"


@pytest.mark.parametrize(
    "hints",
    [
        {"global_batch_size": 64, "max_batch_size": 64, "min_batch_size": 64},
        {"global_batch_size": 64, "max_batch_size": 512},
        {"global_batch_size": 64, "min_batch_size": 8},
        {"max_batch_size": 64},
        {"global_batch_size": 64},
    ],
    ids=["all-equal", "below-max", "above-min", "max-only", "global-only"],
)
def test_a_global_batch_within_its_bounds_is_accepted(hints: dict[str, int]) -> None:
    assert parse_spec(_training(**hints)).training.global_batch_size == hints.get(
        "global_batch_size"
    )


def test_a_stored_spec_outside_its_bounds_is_still_read() -> None:
    spec = parse_spec(_training(global_batch_size=256, max_batch_size=64), stored=True)
    assert (spec.training.global_batch_size, spec.training.max_batch_size) == (256, 64)
