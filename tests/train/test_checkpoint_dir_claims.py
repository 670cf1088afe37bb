"""Two open training contexts of one process on one checkpoint directory are warned of
(each resumes from and prunes the other's checkpoints) whatever the directory is called:
through a symbolic link, as a ``file:`` URL of it (escapes decoded), an object-store URL with
a trailing slash. A relative directory is the one the context opened, in the working
directory of then: it was resolved again against the working directory of the next
``init``, so a context in another directory was warned of and the same one was not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from train_helpers import tiny_model

import danlu.train as dt

SHARED = "already in use by another open training context"


def _context(directory: str) -> dt.TrainContext:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return dt.init(
        model,
        opt,
        global_batch_size=8,
        dataset_size=32,
        checkpoint_dir=directory,
        metrics_file=False,
        environ={},
    )


def _warned(first: str, second: str, caplog: pytest.LogCaptureFixture) -> bool:
    caplog.clear()
    with _context(first), caplog.at_level("WARNING", logger="danlu.train"):
        _context(second).close()
    return SHARED in caplog.text


def test_a_link_to_the_directory_is_the_same_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert _warned(str(tmp_path / "real"), str(tmp_path / "link"), caplog)
    assert not _warned(str(tmp_path / "real"), str(tmp_path / "other"), caplog)


def test_a_file_url_of_the_directory_is_the_same_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert _warned(f"file://{tmp_path}/my%20runs", str(tmp_path / "my runs") + "/", caplog)


def test_a_url_with_a_trailing_slash_is_the_same_directory(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert _warned("memory://danlu-claims/run", "MEMORY://danlu-claims/run/", caplog)
    assert not _warned("memory://danlu-claims/run", "memory://danlu-claims/run2", caplog)


def test_a_relative_directory_is_the_one_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    caplog.clear()
    with _context("ck"), caplog.at_level("WARNING", logger="danlu.train"):
        os.chdir(tmp_path / "b")
        _context("ck").close()  # b/ck: another directory
        assert SHARED not in caplog.text
        _context("../a/ck").close()  # the first one's
        assert SHARED in caplog.text
