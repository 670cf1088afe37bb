"""A checkpoint whose read failed for a passing reason is skipped, but never removed.

Before, a restart whose read of the newest checkpoint failed once (``EIO``, a network
filesystem's or an object store's passing error) marked it invalid, and the first save's
retention deleted it: the run's newest progress was lost although nothing was wrong with it.
A damaged checkpoint (a checksum that does not match, a file that is gone) is still removed.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from danlu.train.checkpoint import CheckpointManager


def _w(step: int) -> dict[str, torch.Tensor]:
    return {"w": torch.full((2,), float(step))}


def _two(directory: Path) -> None:
    mgr = CheckpointManager(str(directory), keep_last=2)
    for step in (1, 2):
        mgr.save(step, _w(step))
    mgr.close()


def _steps(directory: Path) -> list[int]:
    return [i.step for i in CheckpointManager(str(directory)).list_checkpoints()]


def test_a_checkpoint_that_failed_to_read_once_is_kept(tmp_path: Path) -> None:
    _two(tmp_path)
    mgr = CheckpointManager(str(tmp_path), keep_last=2)
    read = mgr.storage.read
    failed: list[str] = []

    def flaky(path: str) -> bytes:
        if not failed and "ckpt-000000000002-" in path and path.endswith("tensors.pt"):
            failed.append(path)
            raise OSError(errno.EIO, "Input/output error", path)
        return read(path)

    mgr.storage.read = flaky  # type: ignore[method-assign]
    assert mgr.load_latest()[0] == 1  # type: ignore[index]
    assert failed
    mgr.save(3, _w(3))
    mgr.close()
    assert _steps(tmp_path) == [2, 3]  # before: [1, 3], step 2 deleted
    assert CheckpointManager(str(tmp_path)).load_latest()[0] == 3  # type: ignore[index]


@pytest.mark.parametrize("damage", ["checksum", "gone"])
def test_a_damaged_checkpoint_is_still_removed(tmp_path: Path, damage: str) -> None:
    _two(tmp_path)
    (ckpt,) = tmp_path.glob("ckpt-000000000002-*")
    if damage == "gone":
        (ckpt / "tensors.pt").unlink()
    else:
        data = bytearray((ckpt / "tensors.pt").read_bytes())
        data[-100] ^= 0xFF
        (ckpt / "tensors.pt").write_bytes(bytes(data))
    mgr = CheckpointManager(str(tmp_path), keep_last=2)
    assert mgr.load_latest()[0] == 1  # type: ignore[index]
    mgr.save(3, _w(3))
    mgr.close()
    assert _steps(tmp_path) == [1, 3]
