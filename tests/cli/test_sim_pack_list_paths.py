"""``danlu sim pack --pods/--nodes`` naming no file: the error named neither the flag nor
what to give (``nothere.csv: cannot read: [Errno 2] No such file or directory:
'nothere.csv'``). It names the flag, what is wrong and an example file (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app


def _lists(tmp_path: Path) -> tuple[Path, Path]:
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,1000\n")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100M16\n")
    return pods, nodes


@pytest.mark.parametrize("flag", ["--pods", "--nodes"])
def test_a_list_that_does_not_exist_is_named_by_its_flag(tmp_path: Path, flag: str) -> None:
    pods, nodes = _lists(tmp_path)
    missing = tmp_path / "nothere.csv"
    given = {"--pods": pods, "--nodes": nodes, flag: missing}
    args = ["sim", "pack", "--seeds", "42", "--pods", str(given["--pods"])]
    result = CliRunner().invoke(app, [*args, "--nodes", str(given["--nodes"])])
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert f"{flag} {missing} does not exist" in said, said
    assert "Errno" not in said, said


def test_a_folder_given_as_a_list_is_named_so(tmp_path: Path) -> None:
    _, nodes = _lists(tmp_path)
    args = ["sim", "pack", "--seeds", "42", "--pods", str(tmp_path), "--nodes", str(nodes)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"--pods {tmp_path} is a folder" in " ".join(result.stderr.split())
