"""A checkpoint URL that fsspec cannot open is a ConfigError naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from danlu.core.errors import ConfigError
from danlu.train.checkpoint import CheckpointManager
from danlu.train.checkpoint.storage import FsspecStorage, LocalStorage, open_storage


def test_unknown_scheme_names_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"DANLU_CHECKPOINT_DIR.*s3://") as info:
        open_storage("s3x://bucket/prefix")
    assert "s3x://bucket/prefix" in str(info.value)


def test_missing_scheme_package_says_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec.core

    def missing(url: str, **options: object) -> None:
        raise ImportError("Please install gcsfs to access Google Storage")

    monkeypatch.setattr(fsspec.core, "url_to_fs", missing)
    with pytest.raises(ConfigError, match=r"'gs' storage needs a package.*gcsfs"):
        open_storage("gs://bucket/prefix")


def test_memory_url_still_opens() -> None:
    storage = open_storage("memory://danlu-test-urls/run")
    assert isinstance(storage, FsspecStorage)
    storage.write(storage.join("a.bin"), b"x")
    assert storage.read(storage.join("a.bin")) == b"x"


@pytest.mark.parametrize("scheme", ["FILE://", "File://"])
def test_a_file_url_in_any_case_is_the_local_directory(tmp_path: Path, scheme: str) -> None:
    """A URL's scheme is case-insensitive: ``FILE:///x`` went to fsspec, which knows no
    protocol ``FILE`` (a ConfigError at the job's start)."""
    storage = open_storage(scheme + str(tmp_path / "ckpt"))
    assert isinstance(storage, LocalStorage) and storage.root == str(tmp_path / "ckpt")
    mgr = CheckpointManager(scheme + str(tmp_path / "ckpt"))
    mgr.save(3, {"w": torch.ones(2)})
    assert len(list((tmp_path / "ckpt").glob("ckpt-000000000003-*/MANIFEST.json"))) == 1
    assert CheckpointManager(str(tmp_path / "ckpt")).load_latest()[0] == 3  # type: ignore[index]


def test_a_url_scheme_in_upper_case_opens_as_in_lower_case() -> None:
    """fsspec knows only lower-case protocol names: ``MEMORY://`` was "Protocol not known"."""
    upper = open_storage("MEMORY://danlu-test-urls/upper")
    assert isinstance(upper, FsspecStorage)
    upper.write(upper.join("a.bin"), b"y")
    lower = open_storage("memory://danlu-test-urls/upper")
    assert lower.read(lower.join("a.bin")) == b"y"
