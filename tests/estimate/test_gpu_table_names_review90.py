"""GPU names in a ``--gpu-table`` file and in look-ups are read with the blanks around them
dropped: an entry ``"h100 "`` (a calibration for the H100, pasted with a trailing blank)
was a new GPU of its own, so ``--gpu h100`` planned with the built-in figures and the
calibration was never used; next to an ``h100`` entry it is the same GPU named twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from danlu.core.errors import ConfigError
from danlu.estimate.memory.gpus import GPUS, get_gpu, load_gpu_table


def _write(tmp_path: Path, table: dict[str, object]) -> Path:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(table), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["h100 ", " H100", "\th100\n"])
def test_an_entry_with_blanks_around_its_name_calibrates_that_gpu(
    tmp_path: Path, name: str
) -> None:
    fields = {"context_bytes": 123 << 20, "capacity_bytes": GPUS["h100"].capacity_bytes}
    table = load_gpu_table(_write(tmp_path, {name: fields}))
    assert get_gpu("h100", table).context_bytes == 123 << 20
    assert set(table) == set(GPUS)  # no GPU named "h100 " beside it


def test_the_same_gpu_with_and_without_blanks_is_named_twice(tmp_path: Path) -> None:
    path = _write(tmp_path, {"h100": {"context_bytes": 1}, "h100 ": {"context_bytes": 2}})
    with pytest.raises(ConfigError, match="both name the GPU 'h100'"):
        load_gpu_table(path)


def test_a_look_up_drops_the_blanks_too() -> None:
    assert get_gpu(" A100 ") is GPUS["a100-80gb"]
