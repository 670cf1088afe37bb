"""A spec file that cannot be read: ``danlu sweep submit nofile.yaml`` said ``error:
nofile.yaml: cannot read job spec nofile.yaml: ...``, the sweep spec called a job spec and
the file named twice. Each command now says one line naming the file once and the kind of
spec it reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app


@pytest.mark.parametrize(
    ("command", "kind"), [(["sweep", "submit"], "sweep spec"), (["submit"], "job spec")]
)
def test_a_missing_spec_file_is_named_once_with_its_kind(
    tmp_path: Path, command: list[str], kind: str
) -> None:
    missing = tmp_path / "nofile.yaml"
    result = CliRunner().invoke(app, [*command, str(missing)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"cannot read {kind} " in lines[0]
    assert lines[0].count("nofile.yaml") == 1
    other = "job spec" if kind == "sweep spec" else "sweep spec"
    assert other not in lines[0]


def test_a_sweep_spec_not_utf8_is_called_a_sweep_spec(tmp_path: Path) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_bytes(b"name: \xff\n")
    result = CliRunner().invoke(app, ["sweep", "submit", str(spec)])
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "sweep spec" in line and "job spec" not in line
    assert line.count("sweep.yaml") == 1
