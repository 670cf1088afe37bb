"""A checkpoint URL that fsspec cannot open is a ConfigError naming the setting."""

from __future__ import annotations

import pytest

from danlu.core.errors import ConfigError
from danlu.train.checkpoint.storage import FsspecStorage, open_storage


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
