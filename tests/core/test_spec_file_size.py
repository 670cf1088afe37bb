"""A job spec file larger than MAX_SPEC_FILE (or endless: /dev/zero) is a SpecError after
that much is read, not a MemoryError after reading it whole; a spec file of any size below it
reads as before (a BOM, CRLF line ends)."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core import spec_file as spec_module
from danlu.core.errors import SpecError
from danlu.core.spec import load_spec_data

BASE = "name: a\ncommand: [python, train.py]\n"


def test_an_endless_spec_file_is_refused_by_its_size() -> None:
    with pytest.raises(SpecError, match=r"/dev/zero is larger than 16 MiB"):
        load_spec_data("/dev/zero")


def test_a_spec_file_past_the_cap_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(BASE)
    monkeypatch.setattr(spec_module, "MAX_SPEC_FILE", len(BASE.encode()) - 1)
    with pytest.raises(SpecError, match="is larger than"):
        load_spec_data(path)
    monkeypatch.setattr(spec_module, "MAX_SPEC_FILE", len(BASE.encode()))
    assert load_spec_data(path)["name"] == "a"


def test_crlf_and_a_bom_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(
        b"\xef\xbb\xbf"
        + (BASE + "env:\n  NOTE: |\n    one\n    two\n").replace("\n", "\r\n").encode()
    )
    data = load_spec_data(path)
    assert data["name"] == "a" and data["env"]["NOTE"] == "one\ntwo\n"
