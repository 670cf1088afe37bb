"""review89: a ``gpu_type`` name that is empty or blank names no GPU and is refused at
parse time, naming ``resources.gpu_type`` and the fix; a stored spec is read as it was."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import loads_spec, parse_spec

_BASE: dict[str, Any] = {"name": "job", "command": ["python", "train.py"]}


@pytest.mark.parametrize("gpu_type", [[""], "", " ", ["A100-80GB", "  "], ["\t"]])
def test_an_empty_gpu_type_name_is_refused(gpu_type: Any) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**_BASE, "resources": {"gpu_type": gpu_type}})
    assert caught.value.field == "resources.gpu_type"
    assert "names no GPU type" in str(caught.value)
    assert "leave gpu_type out" in str(caught.value)


def test_an_empty_gpu_type_name_is_refused_in_yaml() -> None:
    with pytest.raises(SpecError, match=r"resources\.gpu_type"):
        loads_spec("name: job\ncommand: [run]\nresources: {gpu_type: ['']}\n")


def test_named_gpu_types_are_kept() -> None:
    spec = parse_spec({**_BASE, "resources": {"gpu_type": ["A100-80GB", "h100"]}})
    assert spec.resources.gpu_type == ["A100-80GB", "h100"]
    assert parse_spec({**_BASE, "resources": {"gpu_type": []}}).resources.gpu_type == []
    assert parse_spec(_BASE).resources.gpu_type == []


def test_a_stored_spec_with_an_empty_name_is_read_as_it_was() -> None:
    stored = parse_spec({**_BASE, "resources": {"gpu_type": [""]}}, stored=True)
    assert stored.resources.gpu_type == [""]
