"""``DANLU_SLURM_PENDING_LIMIT``: how long Slurm may keep a run PENDING before the Slurm
executor gives it up, read and checked with the other settings and handed to the executor."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.executors.slurm import PENDING_LIMIT
from danlu.server.app import build_slurm_executor


@pytest.mark.parametrize(("value", "limit"), [(None, PENDING_LIMIT), ("600", 600.0), ("0", None)])
def test_the_limit_reaches_the_executor(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str | None, limit: float | None
) -> None:
    monkeypatch.setenv("DANLU_HOME", str(tmp_path))
    if value is not None:
        monkeypatch.setenv("DANLU_SLURM_PENDING_LIMIT", value)
    executor = build_slurm_executor(load_settings(executor="slurm"), None)
    assert executor._pending_limit == limit


@pytest.mark.parametrize("value", ["-1", "inf", "1e9", "soon"])
def test_a_bad_limit_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("DANLU_SLURM_PENDING_LIMIT", value)
    with pytest.raises(ConfigError, match="DANLU_SLURM_PENDING_LIMIT"):
        load_settings()
