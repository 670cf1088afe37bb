"""The GPU table and its recalibration file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from danlu.core.errors import ConfigError, UnknownNameError
from danlu.estimate.memory.gpus import GPUS, get_gpu, load_gpu_table


def test_table_has_the_required_gpus() -> None:
    for name in (
        "h100",
        "h200",
        "a100-80gb",
        "a100-40gb",
        "v100-32gb",
        "v100-16gb",
        "t4",
        "a10",
        "l4",
        "rtx4090",
    ):
        g = GPUS[name]
        assert 0 < g.context_bytes < g.capacity_bytes
    assert get_gpu("H100").cublas_workspace_bytes == 32 << 20
    assert get_gpu("a100").capacity_bytes > 70 << 30


def test_override_file(tmp_path: Path) -> None:
    f = tmp_path / "gpus.json"
    f.write_text(
        json.dumps(
            {
                "h100": {"context_bytes": 123},
                "mi300x": {"capacity_bytes": 192 << 30, "context_bytes": 1 << 30},
            }
        )
    )
    table = load_gpu_table(f)
    assert get_gpu("h100", table).context_bytes == 123
    assert get_gpu("mi300x", table).capacity_bytes == 192 << 30
    f.write_text(json.dumps({"h100": {"bogus": 1}}))
    with pytest.raises(ConfigError, match="gpu-table"):
        load_gpu_table(f)
    with pytest.raises(UnknownNameError, match="h100"):
        get_gpu("k80")


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"h100": "x"}, "must be an object"),
        ({"h100": {"capacity_bytes": -1}}, "capacity_bytes must be >= 1"),
        ({"h100": {"context_bytes": 1.5}}, "context_bytes must be an integer"),
        ({"h100": {"conv_workspace_ratio": True}}, "conv_workspace_ratio must be a number"),
        ({"h100": {"compute_capability": 9}}, "compute_capability must be a string"),
        ({"mi300x": {"context_bytes": 5}}, "needs capacity_bytes"),
    ],
)
def test_bad_override_entries_name_the_entry_and_field(
    tmp_path: Path, entry: dict[str, object], needle: str
) -> None:
    f = tmp_path / "gpus.json"
    f.write_text(json.dumps(entry))
    with pytest.raises(ConfigError, match="--gpu-table") as info:
        load_gpu_table(f)
    assert needle in str(info.value) and next(iter(entry)) in str(info.value)
