"""A sharded checkpoint whose skeleton or DCP metadata cannot be read for a passing reason
(``EIO``, a permission) is not taken as damaged: the read's ``OSError`` was
turned into a ``DataError``, which ``load_latest`` marks invalid and retention then deletes,
though the checkpoint was sound (a plain checkpoint's failed read already kept it)."""

from __future__ import annotations

import builtins
import errno
from pathlib import Path
from typing import Any

import pytest

from danlu.core.errors import DataError
from danlu.train.checkpoint import sharded
from danlu.train.checkpoint.fields import damaged


def _checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "ckpt-000000000003-0123abcd"
    path.mkdir()
    (path / sharded.SKELETON).write_text("{}")
    (path / sharded.METADATA).write_bytes(b"not read")
    return path


@pytest.mark.parametrize("failing", [sharded.SKELETON, sharded.METADATA])
def test_a_passing_read_error_is_no_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    path = _checkpoint(tmp_path)
    real = builtins.open

    def refusing(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).endswith(failing):
            raise OSError(errno.EIO, "Input/output error", str(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing)
    with pytest.raises(OSError) as raised:
        sharded.load_sharded(str(path))
    assert raised.value.errno == errno.EIO
    assert not damaged(raised.value)


@pytest.mark.parametrize("missing", [sharded.SKELETON, sharded.METADATA])
def test_a_missing_file_is_still_damage(tmp_path: Path, missing: str) -> None:
    path = _checkpoint(tmp_path)
    (path / missing).unlink()
    with pytest.raises(DataError) as raised:
        sharded.load_sharded(str(path))
    assert damaged(raised.value)
