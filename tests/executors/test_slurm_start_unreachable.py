"""``danlu server --executor slurm`` whose Slurm cannot be read (its controller unreachable)
refuses to start before it makes anything: it made the home, its database, its admin token
and the executor's directories first, then refused. Slurm's commands here are scripts that
fail as Slurm's do when ``slurmctld`` is down."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import danlu.server.main as main
from danlu.config import load_settings
from danlu.core.errors import ConfigError

UNREACHABLE = "slurm_load_partitions: Unable to contact slurm controller (connect failure)"


def test_a_start_up_slurm_cannot_be_read_for_makes_no_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sinfo", "scontrol"):
        program = bin_dir / name
        program.write_text(f"#!/bin/sh\necho '{name}: error: {UNREACHABLE}' >&2\nexit 1\n")
        program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    home = tmp_path / "home"
    settings = load_settings(home=home, executor="slurm", slurm_partition="gpu")
    said: list[str] = []
    with pytest.raises(ConfigError) as refused:
        main.prepare(settings, port=0, start_loops=False, announce=said.append)
    assert "--executor slurm: cannot read the cluster's nodes" in str(refused.value)
    assert UNREACHABLE in str(refused.value)
    assert not home.exists(), sorted(p.name for p in home.iterdir())
