"""A field written in the wrong section (``gpus: 2`` at the top level, ``resources:
{priority: 5}``) is refused naming where it goes: "unknown field; check the spelling" sent
the user to check a spelling that was right."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import loads_spec
from danlu.core.sweep import parse_sweep


@pytest.mark.parametrize(
    ("text", "field", "home"),
    [
        ("gpus: 2\n", "gpus", "resources.gpus"),
        ("gpu_memory: 20GiB\n", "gpu_memory", "resources.gpu_memory"),
        ("model: m:f\n", "model", "training.model"),
        ("resources: {priority: 5}\n", "resources.priority", "priority"),
        (
            "resources: {global_batch_size: 64}\n",
            "resources.global_batch_size",
            "training.global_batch_size",
        ),
        ("training: {time_limit: 2h}\n", "training.time_limit", "time_limit"),
    ],
)
def test_a_field_in_the_wrong_section_names_its_place(text: str, field: str, home: str) -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec("name: a\ncommand: [x]\n" + text)
    assert caught.value.field == field
    assert caught.value.message.startswith("unknown field here"), caught.value.message
    assert f"write it as {home}" in caught.value.message


def test_a_misspelt_field_is_told_to_check_the_spelling_as_before() -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec("name: a\ncommand: [x]\nresources: {gpuz: 2}\n")
    assert caught.value.field == "resources.gpuz"
    assert caught.value.message == (
        "unknown field; check the spelling against the job spec reference"
    )


def test_a_sweep_trials_misplaced_field_names_its_place() -> None:
    sweep = {
        "name": "s",
        "trial": {"command": ["x"], "gpus": 2},
        "parameters": {"lr": {"values": [0.1]}},
        "method": "grid",
    }
    with pytest.raises(SpecError) as caught:
        parse_sweep(sweep)
    assert caught.value.field == "trial.gpus"
    assert "write it as resources.gpus" in caught.value.message
