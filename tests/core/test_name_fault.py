"""A job or sweep name that breaks the rule where the rule alone misleads is refused saying
what in it breaks it: "use 1-63 letters, digits, ..." refused ``name: 训练``, all letters, and
a name of 64 characters, leaving the user to find the ASCII or to count. A blank or a ``/``
the rule names itself: its message is as before."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import loads_spec, parse_spec
from danlu.core.sweep import parse_sweep

RULE = "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"


@pytest.mark.parametrize(
    ("name", "fault"),
    [
        ("训练", "'训' is not an ASCII letter or digit"),
        ("résumé-run", "'é' is not an ASCII letter or digit"),
        ("a" * 64, "it has 64 characters"),
        ("a" * 62 + "训练", "'训' is not an ASCII letter or digit"),
    ],
)
def test_a_job_name_refused_says_what_in_it_breaks_the_rule(name: str, fault: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": name, "command": ["x"]})
    assert caught.value.field == "name"
    assert caught.value.message == f"{RULE}: {fault}"


@pytest.mark.parametrize("name", ["my job", "run/1", "-run", ""])
def test_a_name_the_rule_explains_gets_the_rule_alone(name: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": name, "command": ["x"]})
    assert (caught.value.field, caught.value.message) == ("name", RULE)


def test_a_unicode_name_in_yaml_names_its_character() -> None:
    with pytest.raises(SpecError, match="'训' is not an ASCII letter"):
        loads_spec("name: 训练\ncommand: [x]\n")


def test_a_sweep_name_refused_says_what_in_it_breaks_the_rule() -> None:
    sweep: dict[str, Any] = {
        "name": "扫描",
        "trial": {"command": ["x"]},
        "parameters": {"lr": {"values": [0.1]}},
        "method": "grid",
    }
    with pytest.raises(SpecError) as caught:
        parse_sweep(sweep)
    assert caught.value.field == "name"
    assert caught.value.message == f"{RULE}: '扫' is not an ASCII letter or digit"


def test_a_valid_name_is_taken() -> None:
    assert parse_spec({"name": "run-1.a_b", "command": ["x"]}).name == "run-1.a_b"
