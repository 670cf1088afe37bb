"""A save that fails after its manifest was written (the directory sync that follows it)
removed the checkpoint, complete and loadable: it is kept now, and the error says so. A
save that fails before its manifest still leaves nothing behind."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from danlu.train.checkpoint import CheckpointManager


def _failing_sync(mgr: CheckpointManager, when: str) -> None:
    synced = mgr.storage.sync_dir

    def failing(path: str) -> None:
        if path == when:
            raise OSError(errno.EIO, "Input/output error")
        synced(path)

    mgr.storage.sync_dir = failing  # type: ignore[method-assign]


def test_a_failure_after_the_manifest_keeps_the_checkpoint(tmp_path: Path) -> None:
    mgr = CheckpointManager(str(tmp_path), keep_last=3)
    mgr.save(1, {"w": torch.zeros(3)})
    _failing_sync(mgr, mgr.storage.root)  # the commit's last step
    with pytest.raises(OSError) as raised:
        mgr.save(2, {"w": torch.ones(3)})
    assert "was committed" in " ".join(raised.value.__notes__)
    step, state = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 2 and torch.equal(state["w"], torch.ones(3))


def test_a_failure_before_the_manifest_leaves_nothing(tmp_path: Path) -> None:
    mgr = CheckpointManager(str(tmp_path), keep_last=3)
    mgr.save(1, {"w": torch.zeros(3)})
    written = mgr.storage.write

    def failing(path: str, data: bytes) -> None:
        if path.endswith("MANIFEST.json"):
            raise OSError(errno.EIO, "Input/output error")
        written(path, data)

    mgr.storage.write = failing  # type: ignore[method-assign]
    with pytest.raises(OSError):
        mgr.save(2, {"w": torch.ones(3)})
    assert [p.name.split("-")[1] for p in tmp_path.iterdir()] == ["000000000001"]
