"""A checkpoint whose manifest cannot be read for a passing reason (``EIO``, an object
store's failure: not a damaged checkpoint) is not removed by retention: a
restart whose read of the newest checkpoint's manifest failed once deleted it at its first
save, the run's newest progress, though a failed read of its files kept it."""

from __future__ import annotations

import errno
from pathlib import Path

import torch

from danlu.train.checkpoint.manager import MANIFEST, CheckpointManager


def _restart_with_unreadable(tmp_path: Path, error: OSError) -> tuple[CheckpointManager, str]:
    first = CheckpointManager(str(tmp_path), keep_last=2, keep_best=0)
    first.save(1, {"w": torch.ones(2)})
    first.save(2, {"w": torch.full((2,), 2.0)})
    newest = first.list_checkpoints()[-1].name
    first.close()
    again = CheckpointManager(str(tmp_path), keep_last=2, keep_best=0)
    real = again.storage.read

    def read(path: str) -> bytes:
        if newest in path and path.endswith(MANIFEST):
            raise error
        return real(path)

    again.storage.read = read  # type: ignore[method-assign]
    return again, newest


def test_retention_keeps_a_checkpoint_whose_manifest_read_failed(tmp_path: Path) -> None:
    again, newest = _restart_with_unreadable(tmp_path, OSError(errno.EIO, "I/O error"))
    again.save(3, {"w": torch.full((2,), 3.0)})
    assert newest in again.storage.list_dirs()
    # read again once the failure passed, it is there and loads
    fresh = CheckpointManager(str(tmp_path), keep_last=2, keep_best=0)
    assert newest in [i.name for i in fresh.list_checkpoints()]
    assert fresh.load(newest)[0] == 2


def test_a_checkpoint_without_a_manifest_is_still_removed(tmp_path: Path) -> None:
    """A save that died before its commit (no manifest: damaged for good) goes as before."""
    again, newest = _restart_with_unreadable(tmp_path, FileNotFoundError(MANIFEST))
    again.save(3, {"w": torch.full((2,), 3.0)})
    assert newest not in again.storage.list_dirs()
