"""Job spec parsing: the minimal spec, elastic GPU ranges, errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from danlu.core.errors import DanluError, SpecError
from danlu.core.spec import JobSpec, load_spec, loads_spec, parse_spec
from danlu.core.sweep import parse_sweep
from danlu.core.units import GiB

MINIMAL_YAML = """\
name: hello
command: [python, -c, "print('hello')"]
resources: {gpus: 1, gpu_memory: 20GiB}
priority: 0
"""


def _spec(**fields: Any) -> dict[str, Any]:
    return {"name": "job", **fields}


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_minimal_yaml_spec_parses() -> None:
    spec = loads_spec(MINIMAL_YAML)
    assert spec.name == "hello"
    assert spec.command == ["python", "-c", "print('hello')"]
    assert (spec.resources.gpus.min, spec.resources.gpus.max) == (1, 1)
    assert not spec.resources.gpus.elastic
    assert spec.resources.gpu_memory == 20 * GiB
    assert spec.priority == 0
    # defaults
    assert spec.shell is False and spec.preemptible is True and spec.max_restarts == 3
    assert spec.project == "default" and spec.env == {}


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [("1..8", (1, 8)), (" 2 .. 4 ", (2, 4)), ("3", (3, 3)), (4, (4, 4)), ("2..2", (2, 2))],
)
def test_gpu_counts_and_elastic_ranges(gpus: Any, expected: tuple[int, int]) -> None:
    spec = parse_spec(_spec(resources={"gpus": gpus}))
    assert (spec.resources.gpus.min, spec.resources.gpus.max) == expected
    assert spec.resources.gpus.elastic == (expected[1] > expected[0])


def test_gpu_memory_auto_and_units() -> None:
    assert parse_spec(_spec(resources={"gpu_memory": "auto"})).resources.gpu_memory == "auto"
    assert parse_spec(_spec(resources={"gpu_memory": "512MiB"})).resources.gpu_memory == 512 << 20
    in_bytes = 20 * 1024**3  # a number without a unit is bytes (what `danlu submit` sends)
    assert parse_spec(_spec(resources={"gpu_memory": in_bytes})).resources.gpu_memory == in_bytes
    assert parse_spec(_spec(resources={"gpu_type": "H100"})).resources.gpu_type == ["H100"]


@pytest.mark.parametrize(
    ("data", "field", "hint"),
    [
        (_spec(resources={"gpus": "lots"}), "resources.gpus", "'1..8'"),
        (_spec(resources={"gpus": "8..1"}), "resources.gpus", "max below min"),
        (_spec(resources={"gpus": True}), "resources.gpus", "such as 2"),
        (_spec(resources={"gpus": -1}), "resources.gpus", "ask for 1 GPU or more"),
        (_spec(resources={"gpus": 2.5}), "resources.gpus", "'1..8'"),
        (_spec(resources={"gpu_memory": "lots"}), "resources.gpu_memory", "e.g. 20GiB"),
        (_spec(resources={"gpu_memory": "20 parsecs"}), "resources.gpu_memory", "GiB"),
        (_spec(resources={"gpu_memory": -5}), "resources.gpu_memory", "negative"),
        (_spec(command="python train.py"), "command", "argv list"),
        ({"name": "-bad"}, "name", "letters, digits"),
        ({"name": "x" * 64}, "name", "1-63"),
        ({"command": ["true"]}, "name", "required"),
        (_spec(colour="blue"), "colour", "unknown field"),
        (_spec(resources={"gpuz": 1}), "resources.gpuz", "unknown field"),
        (_spec(training={"global_batch_size": 0}), "training.global_batch_size", "greater"),
        (_spec(max_restarts=-1), "max_restarts", "greater"),
        # values the store or a process launch cannot take (a 500 before): bounded, finite,
        # no NUL characters; long inputs quoted cut short
        (_spec(priority=2**40), "priority", "within -1,000,000..1,000,000"),
        (_spec(training={"global_batch_size": 2**40}), "training.global_batch_size", "within"),
        (_spec(resources={"gpus": f"1..{2**40}"}), "resources.gpus.max", "within"),
        (_spec(resources={"cpus": float("inf")}), "resources.cpus", "finite"),
        (_spec(training={"expected_duration": float("nan")}), "training.expected_duration", "fin"),
        (_spec(deadline=float("inf")), "deadline", "finite"),
        (_spec(deadline="tomorrow"), "deadline", "'tomorrow' is not a duration; write seconds"),
        (_spec(time_limit="2y"), "time_limit", "units s, m, h, d (90m, 1h30m, 2d)"),
        (_spec(time_limit="inf"), "time_limit", "finite"),
        (_spec(time_limit=True), "time_limit", "expected a duration, got a boolean (true)"),
        (_spec(time_limit="0s"), "time_limit", "greater than 0"),
        (_spec(max_restarts=2**40), "max_restarts", "within 0..1,000,000"),
        (_spec(resources={"memory": 2**70}), "resources.memory", "must lie within 0.."),
        (_spec(resources={"gpu_memory": f"{10**30}GiB"}), "resources.gpu_memory", "within"),
        (_spec(resources={"gpu_memory": "9" * 400}), "resources.gpu_memory", "too large"),
        (_spec(env={"A": "x\x00y"}), "env.A", "NUL"),
        (_spec(env={"A=B": "x"}), "env", "environment variable name"),
        (_spec(command=["python", "\x00"]), "command.1", "NUL"),
        (_spec(project="p\x00"), "project", "NUL"),
        (_spec(resources={"gpus": "x" * 5000}), "resources.gpus", "x... is not a GPU count"),
        (_spec(project="p" * 64), "project", "longer than 63"),
        (_spec(name="train\n"), "name", "1-63 letters"),  # ``$`` let a trailing newline in
        (
            _spec(training={"min_batch_size": 64, "max_batch_size": 32}),
            "training.min_batch_size",
            "above training.max_batch_size",
        ),
        # what no process can be started with (E2BIG at every launch before)
        (_spec(env={"A": "x" * 200_000}), "env.A", "at most 131,071"),
        (_spec(command=["python", "y" * 131_072]), "command.1", "pass large data in a file"),
        (_spec(command=["x" * 100_000] * 12), "command", "at most 1,048,576"),
        (_spec(env={"A": _nested(40)}), "env.A" + ".0" * 30, "deeper than 32"),
        # a location the job is handed whatever its working directory
        (_spec(checkpoint_dir="ckpt/run1"), "checkpoint_dir", "absolute path nor a URL"),
        (_spec(checkpoint_dir=""), "checkpoint_dir", "s3://bucket/run1"),
        (_spec(checkpoint_dir="/" + "c" * 4096), "checkpoint_dir", "at most 4,096"),
    ],
)
def test_errors_name_the_dotted_field_and_the_fix(
    data: dict[str, Any], field: str, hint: str
) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert hint in str(info.value) and len(str(info.value)) < 300
    assert isinstance(info.value, DanluError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("where", ["/shared/ckpt/run1", "s3://bucket/run1", "file:///tmp/c"])
def test_a_checkpoint_dir_is_an_absolute_path_or_a_url(where: str) -> None:
    assert parse_spec(_spec(checkpoint_dir=where)).checkpoint_dir == where


def test_a_workdir_is_an_absolute_path() -> None:
    assert parse_spec(_spec(workdir="/data/runs/a b")).workdir == "/data/runs/a b"
    assert parse_spec(_spec()).workdir is None
    for bad, hint in (("runs/a", "not an absolute path"), ("/" + "x" * 5000, "4096 bytes")):
        with pytest.raises(SpecError, match=hint) as info:
            parse_spec(_spec(workdir=bad))
        assert info.value.field == "workdir"


def test_a_preempt_grace_is_a_duration_up_to_an_hour() -> None:
    assert parse_spec(_spec(preempt_grace="5m")).preempt_grace == 300.0
    assert parse_spec(_spec(preempt_grace=45)).preempt_grace == 45.0
    for bad in (0, "2h"):
        with pytest.raises(SpecError) as info:
            parse_spec(_spec(preempt_grace=bad))
        assert info.value.field == "preempt_grace"


def test_a_stored_spec_is_read_as_it_was_accepted() -> None:
    # an older version accepted these; the jobs are still read (and scheduled), not lost
    older = _spec(priority=2**40, env={"A=B": "x"}, deadline=float("inf"))
    spec = parse_spec(older, stored=True)
    assert (spec.priority, spec.env, spec.deadline) == (2**40, {"A=B": "x"}, float("inf"))
    older["deadline"] = 3600.0
    with pytest.raises(SpecError, match="priority"):
        parse_spec(older)


def test_several_problems_are_counted() -> None:
    with pytest.raises(SpecError, match=r"and 1 more problem"):
        parse_spec({"name": "-bad", "colour": 1})


def test_non_mapping_spec_is_rejected() -> None:
    with pytest.raises(SpecError, match="mapping"):
        parse_spec([1, 2])
    with pytest.raises(SpecError, match="mapping"):
        loads_spec("- just\n- a list\n")


def test_shell_string_needs_shell_true() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(_spec(command="echo hi && ls"))
    assert info.value.field == "command"
    assert "shell: true" in info.value.message
    spec = parse_spec({"name": "job", "shell": True, "command": ["echo hi && ls"]})
    assert spec.shell and spec.command == ["echo hi && ls"]
    # an argv list never needs shell
    assert parse_spec(_spec(command=["echo", "hi"])).shell is False


@pytest.mark.parametrize("command", [["echo", "hi"], []])
def test_shell_true_needs_exactly_one_string(command: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({"name": "job", "shell": True, "command": command})
    assert info.value.field == "command"
    assert "exactly one string" in info.value.message
    with pytest.raises(SpecError) as info:
        parse_spec({"name": "job", "shell": True})  # the default (empty) command too
    assert info.value.field == "command"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("name: j\ncommand: []\n", "empty argv runs nothing"),
        ("name: j\ncommand: ['']\n", "first string is empty"),
        ("name: j\ncommand: ['', train.py]\n", "give the program, then its arguments"),
        ("name: j\nshell: true\ncommand: ['']\n", "give the shell command"),
    ],
)
def test_a_command_that_can_never_run_is_refused(text: str, words: str) -> None:
    with pytest.raises(SpecError, match=words) as info:
        loads_spec(text)
    assert info.value.field == "command"
    assert "e.g. [" in info.value.message  # and how to write one


def test_a_spec_without_a_command_is_read_and_empty_arguments_are_kept() -> None:
    # leaving command out is not writing an empty one: the default is [] (a spec that is
    # not submitted needs none; the control plane's admission requires one)
    assert parse_spec({"name": "j"}).command == []
    assert parse_spec(_spec(command=["printf", "%s", ""])).command == ["printf", "%s", ""]
    with pytest.raises(SpecError, match=r"trial\.command"):
        parse_sweep(
            {
                "name": "s",
                "trial": {"command": []},
                "parameters": {"x": {"values": [1]}},
                "method": "grid",
            }
        )


def test_spec_is_frozen() -> None:
    spec = loads_spec(MINIMAL_YAML)
    with pytest.raises(ValueError):
        spec.priority = 5  # type: ignore[misc]


def test_load_spec_yaml_and_json_files(tmp_path: Path) -> None:
    yml = tmp_path / "job.yaml"
    yml.write_text(MINIMAL_YAML)
    from_yaml = load_spec(yml)
    js = tmp_path / "job.json"
    js.write_text(
        json.dumps(
            {
                "name": "hello",
                "command": ["python", "-c", "print('hello')"],
                "resources": {"gpus": 1, "gpu_memory": "20GiB"},
                "priority": 0,
            }
        )
    )
    from_json = load_spec(js)
    assert isinstance(from_json, JobSpec)
    assert from_yaml == from_json


def test_load_spec_file_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read job spec"):
        load_spec(tmp_path / "missing.yaml")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{name: hello")  # valid-ish YAML, invalid JSON
    with pytest.raises(SpecError, match="not valid JSON"):
        load_spec(bad_json)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(bad_yaml)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("name: ok\nresources: {gpus: many}\n")
    with pytest.raises(SpecError) as info:
        load_spec(wrong)
    assert info.value.field == "resources.gpus"


@pytest.mark.parametrize(
    "path",
    sorted((Path(__file__).parents[2] / "examples" / "jobs").glob("*.yaml")),
    ids=lambda p: p.name,
)
def test_every_example_spec_parses(path: Path) -> None:
    spec = load_spec(path)
    assert spec.name and spec.command


YAML_ALIAS_BOMB = (
    "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i > 1 else '*a'] * 9)}]\n" for i in range(1, 10)
    )
    + "name: bomb\ncommand: [python]\nenv: {X: *l9}\n"
)


def test_unreadable_huge_or_deep_spec_files_are_spec_errors(tmp_path: Path) -> None:
    """A file that is not UTF-8, YAML aliases that expand to billions of values, and nesting
    Python's parsers cannot recurse through are refused with a message, fast."""
    cases = {
        "binary.yaml": (b"\xff\xfe\x00", "not UTF-8 text"),
        "bomb.yaml": (YAML_ALIAS_BOMB.encode(), "more than 100,000 values"),
        "deep.yaml": (b"x: " + b"[" * 5000 + b"]" * 5000, "deeper than 32"),
        "deep.json": (b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "deeper than 32"),
    }
    for name, (content, needle) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(SpecError, match=needle):
            load_spec(path)


def test_depends_on_takes_ids_or_entries_and_names_what_is_wrong() -> None:
    spec = loads_spec(
        "name: a\ncommand: [x]\ndepends_on: [3f2a, {job: '0123456789ab', condition: started}]"
    )
    assert [(d.job, d.condition) for d in spec.depends_on] == [
        ("3f2a", "succeeded"),
        ("0123456789ab", "started"),
    ]
    assert [d.job for d in loads_spec("name: a\ncommand: [x]\ndepends_on: abcd").depends_on] == [
        "abcd"
    ]
    refused = {
        "depends_on: [0123]": "depends_on.0.job: 0123 was read as a number: quote a job id",
        "depends_on: [abc]": "depends_on.0.job: 'abc' is not a job id",
        "depends_on: [ABCD1234]": "depends_on.0.job: 'ABCD1234' is not a job id",
        "depends_on: [{job: abcd, condition: ok}]": "depends_on.0.condition: 'ok' is not one",
        "depends_on: [{job: abcd, when: ok}]": "depends_on.0.when: unknown field",
        "depends_on: [" + ", ".join(["abcd"] * 101) + "]": "depends_on: must hold at most 100",
    }
    for text, message in refused.items():
        with pytest.raises(SpecError) as caught:
            loads_spec("name: a\ncommand: [x]\n" + text)
        assert str(caught.value).startswith(message), caught.value


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("priority: yes", "priority"),
        ("max_restarts: off", "max_restarts"),
        ("resources: {cpus: on}", "resources.cpus"),
        ("resources: {gpus: {min: yes, max: 2}}", "resources.gpus.min"),
        ("resources: {gpus: {min: 1, max: true}}", "resources.gpus.max"),
        ("resources: {gpu_fraction: true}", "resources.gpu_fraction"),
        ("training: {global_batch_size: yes}", "training.global_batch_size"),
        ("training: {min_batch_size: true}", "training.min_batch_size"),
        ("training: {max_batch_size: on}", "training.max_batch_size"),
        ("training: {expected_duration: yes}", "training.expected_duration"),
    ],
)
def test_a_yaml_boolean_is_not_taken_for_a_number(line: str, field: str) -> None:
    """``priority: yes`` was read as priority 1 (while ``gpus: yes`` was refused)."""
    with pytest.raises(SpecError) as info:
        loads_spec(f"name: a\ncommand: [python, train.py]\n{line}\n")
    assert info.value.field == field
    assert "got a boolean" in info.value.message and "write a number" in info.value.message


@pytest.mark.parametrize("gpus", ["²", "1..²", "٣", "³..4"])
def test_a_gpu_count_of_other_digits_says_how_to_write_one(gpus: str) -> None:
    """``gpus: "²"`` passed str.isdigit() and then int() failed: its message leaked out."""
    with pytest.raises(SpecError) as info:
        parse_spec(_spec(command=["x"], resources={"gpus": gpus}))
    assert info.value.field == "resources.gpus"
    assert "is not a GPU count; write 2 or an elastic range '1..8'" in info.value.message
