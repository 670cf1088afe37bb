"""``--gpu-table`` (danlu.estimate.memory.gpus.load_gpu_table) reads its JSON file as UTF-8
with a byte-order mark at its start skipped, as Windows editors write it: such a file was
refused ("Unexpected UTF-8 BOM"), as the estimate's other files are not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from danlu.core.errors import ConfigError
from danlu.estimate.memory.gpus import load_gpu_table

BOM = "\ufeff"
ENTRIES = {"h100": {"context_bytes": 123}, "mi300x": {"capacity_bytes": 192 << 30}}


@pytest.mark.parametrize("bom", [BOM, ""], ids=["bom", "plain"])
def test_a_byte_order_mark_is_skipped(tmp_path: Path, bom: str) -> None:
    path = tmp_path / "gpus.json"
    path.write_bytes((bom + json.dumps(ENTRIES)).encode("utf-8"))
    table = load_gpu_table(path)
    assert table["h100"].context_bytes == 123
    assert table["mi300x"].capacity_bytes == 192 << 30


def test_a_file_not_utf8_is_still_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    path.write_bytes(b'{"h100": {"context_bytes": 1}}\xff')
    with pytest.raises(ConfigError) as err:
        load_gpu_table(path)
    assert f"cannot read {path}" in str(err.value)
