"""A spec file's path holding a NUL is refused naming the path, as any unreadable path is:
it was a bare ValueError ("embedded null byte") from ``load_spec``."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import load_spec, read_spec_text


def test_a_nul_in_the_path_is_a_spec_error(tmp_path: Path) -> None:
    path = f"{tmp_path}/job\x00.yaml"
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert caught.value.field == "path"
    assert "NUL" in caught.value.message
    with pytest.raises(SpecError, match="give the trial"):
        read_spec_text(path, "trial", "give the trial")
