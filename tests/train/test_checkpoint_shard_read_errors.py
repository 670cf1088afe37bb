"""A sharded checkpoint whose shard file cannot be read for a passing reason (``EIO``, a
permission) is not taken as damaged: DCP's error was turned into a ``DataError``, which
``load_latest`` marks invalid and retention then deletes, though the checkpoint was sound.
A shard that is missing or unreadable as data still is damage."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint import state_dict_saver

from danlu.core.errors import DataError
from danlu.train.checkpoint import codec, sharded
from danlu.train.checkpoint.fields import damaged, passing_os_error


def _checkpoint(tmp_path: Path) -> Path:
    """A sharded checkpoint as one process writes it (DCP's files and the skeleton)."""
    path = tmp_path / "ckpt-000000000003-0123abcd"
    skeleton, tensors = codec.encode({"w": torch.arange(6.0), "step": 3})
    state_dict_saver.save(tensors, checkpoint_id=str(path), no_dist=True)
    (path / sharded.SKELETON).write_text(json.dumps(skeleton))
    return path


def test_the_checkpoint_loads(tmp_path: Path) -> None:
    state = sharded.load_sharded(str(_checkpoint(tmp_path)))
    assert state["step"] == 3 and torch.equal(state["w"], torch.arange(6.0))


@pytest.mark.parametrize("code", [errno.EIO, errno.EACCES])
def test_a_passing_shard_read_error_is_no_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    path = _checkpoint(tmp_path)
    real = Path.open

    def refusing(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.suffix == ".distcp":  # how DCP's reader opens a shard
            raise OSError(code, "cannot read", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refusing)
    with pytest.raises(OSError) as raised:
        sharded.load_sharded(str(path))
    assert raised.value.errno == code
    assert not damaged(raised.value)
    assert str(path) in str(raised.value)


def test_a_missing_shard_is_still_damage(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path)
    for shard in path.glob("*.distcp"):
        shard.unlink()
    with pytest.raises(DataError) as raised:
        sharded.load_sharded(str(path))
    assert damaged(raised.value)


def test_passing_errors_are_found_inside_dcp_failures() -> None:
    from torch.distributed.checkpoint.api import CheckpointException

    eio = OSError(errno.EIO, "Input/output error")
    held = CheckpointException("load", {1: (eio, None)})
    assert passing_os_error(held) is eio
    gone = CheckpointException("load", {0: (FileNotFoundError(errno.ENOENT, "gone"), None)})
    assert passing_os_error(gone) is None
    assert passing_os_error(ValueError("bad")) is None
