"""A checkpoint in a newer version of the format (``danlu.checkpoint/2``: a newer danlu
wrote it, and a downgraded one cannot read it) is neither passed over nor deleted:
``load_latest`` fell back past it with a warning, and the next save's retention removed it,
so a downgrade lost the run's newest progress for good."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from danlu.train.checkpoint import CheckpointManager
from danlu.train.checkpoint.manager import MANIFEST
from danlu.train.state import IncompatibleCheckpointError


def _newest(directory: Path) -> Path:
    return sorted(p for p in directory.iterdir() if p.name.startswith("ckpt-"))[-1]


def _as_newer_format(checkpoint: Path) -> None:
    manifest = json.loads((checkpoint / MANIFEST).read_text())
    manifest["format"] = "danlu.checkpoint/2"
    (checkpoint / MANIFEST).write_text(json.dumps(manifest))


def test_resuming_past_a_newer_format_checkpoint_is_refused_naming_it(tmp_path: Path) -> None:
    with CheckpointManager(str(tmp_path)) as manager:
        manager.save(1, {"w": torch.ones(2)})
        manager.save(2, {"w": torch.full((2,), 2.0)})
    newer = _newest(tmp_path)
    _as_newer_format(newer)
    with (
        CheckpointManager(str(tmp_path)) as manager,
        pytest.raises(IncompatibleCheckpointError, match=r"danlu\.checkpoint/2") as raised,
    ):
        manager.load_latest()
    assert newer.name in str(raised.value)


def test_retention_keeps_a_newer_format_checkpoint(tmp_path: Path) -> None:
    with CheckpointManager(str(tmp_path), keep_last=1) as manager:
        manager.save(1, {"w": torch.ones(2)})
    newer = _newest(tmp_path)
    _as_newer_format(newer)
    with CheckpointManager(str(tmp_path), keep_last=1) as manager:
        for step in (2, 3, 4):
            manager.save(step, {"w": torch.full((2,), float(step))})
        assert [i.step for i in manager.list_checkpoints()] == [4]
    assert newer.is_dir()  # kept, with what the newer danlu wrote
    assert json.loads((newer / MANIFEST).read_text())["format"] == "danlu.checkpoint/2"


def test_a_damaged_manifest_is_still_passed_over_and_removed(tmp_path: Path) -> None:
    """Only another version of the format is kept: a manifest that names no format of
    danlu's (a damaged or foreign file) is skipped and removed by retention, as before."""
    with CheckpointManager(str(tmp_path), keep_last=2) as manager:
        manager.save(1, {"w": torch.ones(2)})
        manager.save(2, {"w": torch.full((2,), 2.0)})
    damaged = _newest(tmp_path)
    manifest = json.loads((damaged / MANIFEST).read_text())
    manifest["format"] = "other.format/2"
    (damaged / MANIFEST).write_text(json.dumps(manifest))
    with CheckpointManager(str(tmp_path), keep_last=1) as manager:
        found = manager.load_latest()
        assert found is not None and found[0] == 1
        manager.save(3, {"w": torch.full((2,), 3.0)})
    assert not damaged.exists()
