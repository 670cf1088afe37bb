"""A manifest that is JSON but no object (a list, a number, null: a corrupted or foreign
file) is an invalid checkpoint: skipped with a fallback to the one before, never a raw
``AttributeError`` from ``load_latest``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from danlu.core.errors import DataError
from danlu.train.checkpoint import CheckpointManager
from danlu.train.checkpoint.manager import MANIFEST


def _newest(directory: Path) -> Path:
    return sorted(p for p in directory.iterdir() if p.name.startswith("ckpt-"))[-1]


@pytest.mark.parametrize("text", ["[1, 2]", "null", "3", '"ckpt"'])
def test_a_manifest_that_is_not_an_object_is_skipped(tmp_path: Path, text: str) -> None:
    with CheckpointManager(str(tmp_path)) as manager:
        manager.save(1, {"w": torch.ones(2)})
        manager.save(2, {"w": torch.full((2,), 2.0)})
    (_newest(tmp_path) / MANIFEST).write_text(text)
    with CheckpointManager(str(tmp_path)) as manager:
        assert [i.step for i in manager.list_checkpoints()] == [1]
        found = manager.load_latest()
    assert found is not None
    step, state = found
    assert step == 1 and torch.equal(state["w"], torch.ones(2))


def test_loading_a_checkpoint_whose_manifest_is_not_an_object_is_a_data_error(
    tmp_path: Path,
) -> None:
    with CheckpointManager(str(tmp_path)) as manager:
        manager.save(1, {"w": torch.ones(2)})
    newest = _newest(tmp_path)
    (newest / MANIFEST).write_text(json.dumps([newest.name]))
    with CheckpointManager(str(tmp_path)) as manager, pytest.raises(DataError, match=MANIFEST):
        manager.load(newest.name)
