"""Reading spec files lives in :mod:`danlu.core.spec_file`; :mod:`danlu.core.spec`
re-exports its names, so every import of them from there keeps working and names the same
objects."""

from __future__ import annotations

from pathlib import Path

import pytest

import danlu.core.spec as spec
import danlu.core.spec_file as spec_file


@pytest.mark.parametrize(
    "name",
    ["MAX_SPEC_FILE", "load_spec_data", "read_spec_text", "refuse_named_pipe", "spec_file_data"],
)
def test_the_spec_module_re_exports_the_file_readers(name: str) -> None:
    assert getattr(spec, name) is getattr(spec_file, name)


def test_load_spec_reads_a_file_through_the_file_module(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text('{"name": "a", "command": ["python", "train.py"]}')
    assert spec_file.load_spec_data(path) == {"name": "a", "command": ["python", "train.py"]}
    assert spec.load_spec(path).command == ["python", "train.py"]
