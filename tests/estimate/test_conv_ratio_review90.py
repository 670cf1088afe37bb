"""A ``--gpu-table`` entry's ``conv_workspace_ratio`` is bounded: ``1e308`` was taken, and
replaying any traced convolution for that GPU raised a bare OverflowError (``int(inf)``:
the workspace of ``hint * 1e308`` bytes). Now a :class:`ConfigError` naming the entry and
the field; a ratio up to the bound loads and replays (the GPU then does not fit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from danlu.core.errors import ConfigError
from danlu.estimate.memory.gpus import load_gpu_table
from danlu.estimate.memory.predict import replay
from danlu.estimate.memory.trace_result import StepTrace

BOUND = 1e6
"""danlu.estimate.memory.gpus.MAX_CONV_WORKSPACE_RATIO."""


def _table(tmp_path: Path, ratio: float) -> Path:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"h100": {"conv_workspace_ratio": ratio}}), encoding="utf-8")
    return path


def _conv_trace() -> StepTrace:
    """A step with one convolution's output (1 MiB) and its workspace site."""
    events = [(1, 1 << 20), (2, 1 << 20), (2, -(1 << 20))]
    return StepTrace(
        batch_size=1,
        events=events,
        marks={"measure_start": 1, "measure_end": 3, "optimizer": 3},
        peak_logical_bytes=2 << 20,
        step_start_bytes=1 << 20,
        breakdown={},
        sites=[(2, "conv", 1 << 20)],
    )


@pytest.mark.parametrize("ratio", [1e308, 1e7, BOUND * 1.5])
def test_a_ratio_past_the_bound_is_refused_naming_the_entry(tmp_path: Path, ratio: float) -> None:
    with pytest.raises(ConfigError) as info:
        load_gpu_table(_table(tmp_path, ratio))
    assert "'h100'" in str(info.value)
    assert "conv_workspace_ratio" in str(info.value)


def test_a_ratio_at_the_bound_loads_and_replays(tmp_path: Path) -> None:
    gpu = load_gpu_table(_table(tmp_path, BOUND))["h100"]
    assert gpu.conv_workspace_ratio == BOUND
    estimate = replay(_conv_trace(), gpu)
    assert estimate.peak_reserved_bytes >= BOUND * (1 << 20)
    assert not estimate.fits


def test_a_calibrated_ratio_still_loads(tmp_path: Path) -> None:
    gpu = load_gpu_table(_table(tmp_path, 2.5))["h100"]
    assert gpu.conv_workspace_ratio == 2.5
    assert replay(_conv_trace(), gpu).fits
