"""danlu.train's checkpoint directory:

- a ``~`` in it, or a ``file://`` URL, put the checkpoints in the directory meant but the
  metrics elsewhere (a literal ``./~/ck/metrics.jsonl``; ``./danlu-metrics.jsonl``): they are
  now in ``<checkpoint dir>/metrics.jsonl``, as for any other local path;
- a directory that exists but cannot be written was found only at the first save, a raw
  ``OSError`` after training up to it (again at every restart): it is now a
  :class:`~danlu.core.errors.ConfigError` from ``init``, naming the setting.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.checkpoint.storage import LocalStorage, local_directory


def _train(checkpoint_dir: str, steps: int = 4) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = tiny_regression(8).tensors
    with dt.init(
        model,
        opt,
        global_batch_size=8,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every_steps=2,
        environ={},
    ) as ctx:
        while ctx.step_num < steps:
            ctx.step((x, y), mse_loss)


def _steps(path: Path) -> list[int]:
    """The steps of the training records in the JSONL file ``path`` (not the record that
    says the checkpoint of the last step at close, which has no loss)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["step"] for r in records if "loss" in r]


@pytest.mark.parametrize(
    ("given", "where"),
    [
        pytest.param("~/ck", "home/ck", id="tilde"),
        pytest.param("file://{tmp}/urlck", "urlck", id="file-url"),
        pytest.param("rel/ck", "cwd/rel/ck", id="relative"),
    ],
)
def test_metrics_go_to_the_checkpoint_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, where: str
) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "cwd")
    _train(given.format(tmp=tmp_path))
    directory = tmp_path / where
    assert _steps(directory / "metrics.jsonl") == [1, 2, 3, 4]
    assert any(entry.is_dir() for entry in directory.iterdir())  # the checkpoints
    assert sorted(p.name for p in (tmp_path / "cwd").iterdir()) == (
        ["rel"] if given.startswith("rel") else []
    )


@pytest.mark.parametrize(
    ("given", "local"),
    [
        pytest.param("~/ck", "{home}/ck", id="tilde"),
        pytest.param("file:///data/ck", "/data/ck", id="file-url"),
        pytest.param("FILE:///data/ck", "/data/ck", id="file-url-upper-case"),
        pytest.param("File://localhost/data/ck", "/data/ck", id="file-url-mixed-case"),
        pytest.param("file:///data/my%20ck/", "/data/my ck", id="file-url-escaped"),
        pytest.param("/data/my%20ck/", "/data/my%20ck", id="absolute-never-decoded"),
        pytest.param("S3://bucket/ck", None, id="s3-upper-case"),
        pytest.param("/data/ck", "/data/ck", id="absolute"),
        pytest.param("ck", "{cwd}/ck", id="relative"),
        pytest.param("s3://bucket/ck", None, id="s3"),
        pytest.param("memory://ck", None, id="memory"),
    ],
)
def test_local_directory_is_where_local_storage_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, local: str | None
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    expected = None if local is None else local.format(home=tmp_path / "home", cwd=tmp_path)
    assert local_directory(given) == expected


# ---------------------------------------------------------------- a read-only directory


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """An existing directory this process cannot create files in: mode 0555, or, for root
    (whom mode bits do not stop), the immutable attribute (``chattr +i``)."""
    directory = tmp_path / "ro"
    directory.mkdir()
    if os.geteuid() != 0:
        directory.chmod(0o555)
        yield directory
        directory.chmod(0o755)
        return
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("root ignores mode bits, and chattr (to make a directory immutable) is absent")
    made = subprocess.run([chattr, "+i", str(directory)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"this filesystem has no immutable attribute: {made.stderr!r}")
    try:
        yield directory
    finally:
        subprocess.run([chattr, "-i", str(directory)], check=True)


def _init(checkpoint_dir: str) -> Any:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return dt.init(
        model,
        opt,
        global_batch_size=8,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every_steps=2,
        environ={},
        metrics_file=False,
    )


def test_a_read_only_checkpoint_dir_is_refused_at_init(read_only: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be written") as caught:
        _init(str(read_only))
    message = str(caught.value)
    assert str(read_only) in message
    assert "give checkpoint_dir (DANLU_CHECKPOINT_DIR) a directory this job can write" in message


def test_a_read_only_file_system_is_refused_at_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only mount (EROFS), as the reviewer's, by the OS call that creates files."""
    directory = tmp_path / "ro"
    directory.mkdir()
    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).startswith(str(directory)) and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    with pytest.raises(ConfigError, match=r"cannot be written.*Read-only file system"):
        _init(str(directory))
    monkeypatch.undo()
    assert list(directory.iterdir()) == []


def test_the_write_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path / "ck"))
    assert storage.root == str(tmp_path / "ck")
    assert list((tmp_path / "ck").iterdir()) == []
