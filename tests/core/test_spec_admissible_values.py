"""A new spec is refused, naming the field and the fix, for a value the control plane's
admission can never take or the scheduler never match, which the spec's own checks passed:
a ``gpu_type`` name with blanks around it (an unknown GPU type at admission), a ``project``
or ``user`` no project or user can be named (unknown at admission, or a plain user's 403), a
program of blanks only (a launch that fails every run), a ``gpu_fraction`` with more than one
GPU and ``training.family: auto`` without ``training.model`` (both refused at admission only,
after a sweep's or a client's own checks had passed). A stored spec is read as it was."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import loads_spec, parse_spec

_BASE: dict[str, Any] = {"name": "job", "command": ["python", "train.py"]}


@pytest.mark.parametrize(
    ("gpu_type", "fix"),
    [
        (" a100 ", "'a100'"),
        (["A100", " H100"], "'H100'"),
        ("a100\u00a0", "'a100'"),  # a no-break space, pasted from a page
    ],
)
def test_a_gpu_type_with_blanks_around_it_is_refused(gpu_type: Any, fix: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**_BASE, "resources": {"gpu_type": gpu_type}})
    assert caught.value.field == "resources.gpu_type"
    assert "blanks around it" in caught.value.message
    assert f"write {fix}" in caught.value.message


def test_a_gpu_type_with_blanks_is_refused_in_yaml() -> None:
    with pytest.raises(SpecError, match=r"resources\.gpu_type: .*write 'a100'"):
        loads_spec("name: job\ncommand: [run]\nresources: {gpu_type: ' a100 '}\n")


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("project", " ml ", "write 'ml'"),
        ("project", "my project", "letters, digits"),
        ("project", "team/ml", "letters, digits"),
        ("project", "-ml", "starting with a letter or digit"),
        ("project", "ml@lab", "letters, digits"),  # a project name takes no '@'
        ("user", " alice ", "write 'alice'"),
        ("user", "al ice", "letters, digits"),
        ("user", "alice/x", "letters, digits"),
        ("user", "训练", "'训' is not an ASCII letter or digit"),
    ],
)
def test_a_project_or_user_no_one_can_be_named_is_refused(
    field: str, value: str, said: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**_BASE, field: value})
    assert caught.value.field == field
    assert said in caught.value.message
    assert repr(value) in caught.value.message


@pytest.mark.parametrize(
    "fields",
    [
        {"project": "ml-team.v2", "user": "alice@example.org"},
        {"project": "default", "user": "default"},
        {"project": "P_1", "user": "bob.smith"},
    ],
)
def test_names_as_projects_and_users_are_named_are_taken(fields: dict[str, str]) -> None:
    spec = parse_spec({**_BASE, **fields})
    assert (spec.project, spec.user) == (fields["project"], fields["user"])


def test_a_control_character_in_a_name_is_still_said_so() -> None:
    """The control-character check names the character, not the naming rule."""
    with pytest.raises(SpecError) as caught:
        parse_spec({**_BASE, "project": "lab\t"})
    assert caught.value.field == "project"
    assert "control characters" in caught.value.message
    with pytest.raises(SpecError) as caught:
        parse_spec({**_BASE, "resources": {"gpu_type": ["h100\n"]}})
    assert caught.value.field == "resources.gpu_type.0"
    assert "control characters" in caught.value.message


@pytest.mark.parametrize(
    ("command", "shell", "said"),
    [
        ([" ", "train.py"], False, "give the program, then its arguments"),
        (["\u3000"], False, "give the program, then its arguments"),
        (["   "], True, "give the shell command"),
    ],
)
def test_a_program_of_blanks_only_is_refused(command: list[str], shell: bool, said: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**_BASE, "command": command, "shell": shell})
    assert caught.value.field == "command"
    assert said in caught.value.message


def test_a_program_with_a_blank_inside_is_taken() -> None:
    spec = parse_spec({**_BASE, "command": ["/opt/my tools/run", " --flag "]})
    assert spec.command == ["/opt/my tools/run", " --flag "]


@pytest.mark.parametrize("gpus", [2, "1..4"])
def test_a_gpu_fraction_with_more_than_one_gpu_is_refused(gpus: Any) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**_BASE, "resources": {"gpus": gpus, "gpu_fraction": 0.5}})
    assert caught.value.field == "resources.gpu_fraction"
    assert "gpus: 1" in caught.value.message


def test_a_gpu_fraction_of_one_gpu_is_taken() -> None:
    spec = parse_spec({**_BASE, "resources": {"gpus": 1, "gpu_fraction": 0.5}})
    assert spec.resources.gpu_fraction == 0.5


def test_family_auto_without_a_model_is_refused() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**_BASE, "training": {"family": "auto"}})
    assert caught.value.field == "training.family"
    assert "training.model" in caught.value.message
    spec = parse_spec({**_BASE, "training": {"family": "auto", "model": "pkg.mod:make"}})
    assert spec.training.family == "auto"


@pytest.mark.parametrize(
    "fields",
    [
        {"resources": {"gpu_type": [" a100 "]}},
        {"project": " ml "},
        {"user": "al ice"},
        {"command": ["  "]},
        {"resources": {"gpus": 2, "gpu_fraction": 0.5}},
        {"training": {"family": "auto"}},
    ],
)
def test_a_stored_spec_is_read_as_it_was(fields: dict[str, Any]) -> None:
    stored = parse_spec({**_BASE, **fields}, stored=True)
    dumped = stored.model_dump(exclude_unset=True)
    for key, value in fields.items():
        if key == "resources" and "gpus" in value:
            assert stored.resources.gpus.max == 2
            assert stored.resources.gpu_fraction == 0.5
        else:
            assert dumped[key] == value
