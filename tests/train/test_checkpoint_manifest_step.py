"""A manifest's ``step`` and ``created_ns`` must be whole numbers: ``int()`` read a step of
``1.5`` as step 1 (and ``"2"`` or ``true`` as numbers), so a damaged manifest resumed the run
at a step it never checkpointed. Such a manifest is invalid now: skipped, with a fallback to
the checkpoint before, as other invalid manifests are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from danlu.core.errors import DataError
from danlu.train.checkpoint import CheckpointManager
from danlu.train.checkpoint.manager import MANIFEST


def _two_checkpoints(directory: Path) -> Path:
    """Checkpoints of steps 1 and 2 in ``directory``; the manifest of step 2's."""
    with CheckpointManager(str(directory)) as manager:
        manager.save(1, {"w": torch.ones(2)})
        manager.save(2, {"w": torch.full((2,), 2.0)})
    newest = sorted(p for p in directory.iterdir() if p.name.startswith("ckpt-"))[-1]
    return newest / MANIFEST


def _set(manifest: Path, key: str, value: object) -> None:
    data = json.loads(manifest.read_text())
    data[key] = value
    manifest.write_text(json.dumps(data))


@pytest.mark.parametrize("key", ["step", "created_ns"])
@pytest.mark.parametrize("value", [1.5, "2", True, None, [2]])
def test_a_manifest_with_a_number_that_is_not_whole_is_skipped(
    tmp_path: Path, key: str, value: object
) -> None:
    manifest = _two_checkpoints(tmp_path)
    _set(manifest, key, value)
    with CheckpointManager(str(tmp_path)) as manager:
        assert [i.step for i in manager.list_checkpoints()] == [1]
        found = manager.load_latest()
        with pytest.raises(DataError, match=f"{MANIFEST}.*{key}"):
            manager.load(manifest.parent.name)
    assert found is not None
    step, state = found
    assert step == 1 and torch.equal(state["w"], torch.ones(2))


def test_a_whole_step_written_as_a_float_is_read(tmp_path: Path) -> None:
    manifest = _two_checkpoints(tmp_path)
    _set(manifest, "step", 2.0)
    with CheckpointManager(str(tmp_path)) as manager:
        steps = [i.step for i in manager.list_checkpoints()]
        found = manager.load_latest()
    assert steps == [1, 2] and all(type(s) is int for s in steps)
    assert found is not None and found[0] == 2
