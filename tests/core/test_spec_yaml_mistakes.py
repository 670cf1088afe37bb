"""Mistakes a user makes writing a job spec in YAML, each refused naming the field and what
to write instead. The first table is what was refused in pydantic's words alone ("Input
should be greater than 0", "unable to interpret input", ...) or without the fix; the second
holds mistakes whose errors already said both, kept so."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import load_spec, loads_spec
from danlu.core.sweep import parse_sweep

BASE = "name: a\ncommand: [python, train.py]\n"


def _refused(text: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        loads_spec(text)
    return caught.value


@pytest.mark.parametrize(
    ("line", "field", "says"),
    [
        ("time_limit: 0", "time_limit", "greater than 0 seconds, not 0 seconds, or leave it out"),
        ("deadline: 0s", "deadline", "greater than 0 seconds, not 0 seconds, or leave it out"),
        (
            "preempt_grace: 2h",
            "preempt_grace",
            "must be less than or equal to 3600 seconds (1h), not 7200 seconds (2h)",
        ),
        ("max_restarts: -1", "max_restarts", "must be greater than or equal to 0, not -1"),
        ("resources: {cpus: -2}", "resources.cpus", "must be greater than or equal to 0, not -2"),
        (
            "resources: {gpu_fraction: 2}",
            "resources.gpu_fraction",
            "less than or equal to 1, not 2",
        ),
        (
            "training: {global_batch_size: 0}",
            "training.global_batch_size",
            "must be greater than 0, not 0",
        ),
        ("preemptible: maybe", "preemptible", "'maybe' is not true or false: write true or false"),
        ("shell: 2", "shell", "2 is not true or false: write true or false"),
        ("env: {'A=1': x}", "env", "it holds '='): write the name as the key and the value"),
        ("env: {'A=1': x}", "env", "e.g. env: {A: '1'}"),
        ("env: {'': x}", "env", "(it is empty): name the variable, e.g. env: {SEED: '1'}"),
        (
            "depends_on: ['abcd1234:failed']",
            "depends_on.0.job",
            "write the condition apart, {job: abcd1234, condition: failed}",
        ),
    ],
)
def test_a_mistake_once_told_without_its_fix_names_it(line: str, field: str, says: str) -> None:
    error = _refused(BASE + line + "\n")
    assert error.field == field
    assert says in error.message, error.message
    assert "Input should be greater" not in error.message


@pytest.mark.parametrize(
    ("line", "field", "says"),
    [
        ("resources: {gpus: -1}", "resources.gpus", "ask for 1 GPU or more (got -1)"),
        ("resources: {gpus: 1-8}", "resources.gpus", "write 2 or an elastic range '1..8'"),
        ("resources: {gpus: 2.5}", "resources.gpus", "is not a GPU count"),
        ("resources: {gpu_memory: 80}", "resources.gpu_memory", "give the size a unit"),
        ("resources: {gpu_memory: 80GiB per gpu}", "resources.gpu_memory", "e.g. 20GiB"),
        ("time_limit: 2 hours", "time_limit", "is not a duration; write seconds"),
        ("deadline: 2026-12-31", "deadline", "was read as a date, not a duration"),
        ("env: [A=1, B=2]", "env", "write env: {SEED: '1'}"),
        ("env: {SEED: 1}", "env.SEED", "quote it, '1'"),
        ("priority: 1\npriority: 2", "priority", "written twice (lines 3 and 4)"),
        ("priority: high", "priority", "write a whole number"),
        ("resources: {cpus: 4 cores}", "resources.cpus", "without a unit"),
        ("resources: {gpu_type: 3090}", "resources.gpu_type", "quote it, gpu_type: '3090'"),
        ("workdir: data/runs", "workdir", "is not an absolute path"),
        ("training: {precision: fp8}", "training.precision", "is not one of fp32, fp16 or bf16"),
        ("depends_on: [preprocess]", "depends_on.0.job", "give the id `danlu submit` printed"),
    ],
)
def test_a_mistake_whose_error_named_its_fix_still_does(line: str, field: str, says: str) -> None:
    error = _refused(BASE + line + "\n")
    assert error.field == field
    assert says in error.message, error.message


@pytest.mark.parametrize("value", ["AUTO", "Auto", " auto "])
def test_gpu_memory_auto_in_any_case_is_auto(value: str) -> None:
    """``gpu_memory: Auto`` was "not a byte size; write a number with an optional unit",
    which never named ``auto``."""
    spec = loads_spec(BASE + f"resources: {{gpu_memory: '{value}'}}\n")
    assert spec.resources.gpu_memory == "auto"


@pytest.mark.parametrize("text", [b"", b"\n\n", b"# a spec, to come\n# name: a\n", b"\xef\xbb\xbf"])
def test_an_empty_spec_file_says_it_is_empty(tmp_path: Path, text: bytes) -> None:
    """An empty file (or one of comments, or of a BOM alone) was refused as "name: this
    field is required", as if the rest of the spec were there."""
    path = tmp_path / "job.yaml"
    path.write_bytes(text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert caught.value.field == ""
    assert caught.value.message.startswith("the job spec is empty (no fields)")
    assert "name: train and command: [python, train.py]" in caught.value.message


def test_an_empty_sweep_spec_says_it_is_empty() -> None:
    with pytest.raises(SpecError) as caught:
        parse_sweep({})
    assert caught.value.field == ""
    assert caught.value.message.startswith("the sweep spec is empty")


def test_a_spec_with_a_bom_and_windows_line_ends_loads(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + BASE.replace("\n", "\r\n").encode())
    assert load_spec(path).command == ["python", "train.py"]


def test_a_spec_file_not_in_utf8_says_to_save_it_so(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes("name: café\ncommand: [x]\n".encode("latin-1"))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert caught.value.message.endswith("save it as UTF-8")


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "null\n", "~"])
def test_empty_spec_text_says_it_is_empty_as_an_empty_file_does(text: str) -> None:
    """``loads_spec("")`` was "a job spec must be a mapping of fields, got NoneType", where
    :func:`load_spec` of an empty file reads an empty mapping."""
    with pytest.raises(SpecError) as caught:
        loads_spec(text)
    assert caught.value.field == ""
    assert caught.value.message.startswith("the job spec is empty (no fields)")


@pytest.mark.parametrize(
    ("line", "field"),
    [("workdir: ~/runs", "workdir"), ("checkpoint_dir: ~/ckpt", "checkpoint_dir")],
)
def test_a_path_from_the_home_says_tilde_is_not_expanded(line: str, field: str) -> None:
    """``workdir: ~/runs`` was "is not an absolute path; write one", leaving the user to
    wonder why a path from their home is not one."""
    error = _refused(BASE + line + "\n")
    assert error.field == field
    assert "(~ is not expanded here: write the home's own path" in error.message
    assert "write" in error.message.rpartition(")")[2]


def test_a_relative_path_is_told_as_before() -> None:
    error = _refused(BASE + "workdir: data/runs\n")
    assert error.message == "'data/runs' is not an absolute path; write one, e.g. /data/runs"
