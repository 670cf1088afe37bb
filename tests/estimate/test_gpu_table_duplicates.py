"""A ``--gpu-table`` file that names one GPU twice, or one field twice, is refused naming
both: the later one replaced the earlier silently (``json`` keeps the last of two equal
names, and names are read in any case, ``_`` as ``-``, aliases resolved)."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import ConfigError
from danlu.estimate.memory import load_gpu_table


def _table(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gpus.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("first", "second"),
    [("H100", "h100"), ("a100", "A100-80GB"), ("my_gpu", "my-gpu")],
)
def test_two_entries_of_one_gpu_are_refused_naming_both(
    tmp_path: Path, first: str, second: str
) -> None:
    path = _table(
        tmp_path,
        f'{{"{first}": {{"capacity_bytes": 1000000000}}, '
        f'"{second}": {{"capacity_bytes": 2000000000}}}}',
    )
    with pytest.raises(ConfigError, match="both name the GPU") as caught:
        load_gpu_table(path)
    assert repr(first) in str(caught.value) and repr(second) in str(caught.value)


def test_a_name_written_twice_is_refused(tmp_path: Path) -> None:
    path = _table(tmp_path, '{"h100": {"context_bytes": 1}, "h100": {"context_bytes": 2}}')
    with pytest.raises(ConfigError, match=r"gives 'h100' twice in one object; keep one$"):
        load_gpu_table(path)


def test_a_field_written_twice_in_one_entry_is_refused(tmp_path: Path) -> None:
    path = _table(tmp_path, '{"h100": {"context_bytes": 1, "context_bytes": 2}}')
    with pytest.raises(ConfigError, match="'context_bytes' twice"):
        load_gpu_table(path)


def test_distinct_gpus_still_load(tmp_path: Path) -> None:
    path = _table(
        tmp_path,
        '{"h100": {"context_bytes": 123}, "new-gpu": {"capacity_bytes": 1000000000}}',
    )
    table = load_gpu_table(path)
    assert table["h100"].context_bytes == 123
    assert table["new-gpu"].capacity_bytes == 1000000000
