"""The GPU table and its recalibration file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from danlu.core.errors import ConfigError, UnknownNameError
from danlu.estimate.memory.gpus import GPUS, get_gpu, gpu_for_device, load_gpu_table


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


def test_an_override_is_found_by_the_name_it_is_looked_up_with(tmp_path: Path) -> None:
    # entries were keyed name.lower() but looked up with "_" read as "-": never found
    f = tmp_path / "gpus.json"
    f.write_text(
        json.dumps(
            {
                "RTX_6000": {"capacity_bytes": 48 << 30, "context_bytes": 300 << 20},
                "a100_80gb": {"context_bytes": 456},
                "rtx_4090": {"context_bytes": 789},  # an alias of rtx4090
            }
        )
    )
    table = load_gpu_table(f)
    for name in ("rtx_6000", "RTX_6000", "rtx-6000"):
        assert get_gpu(name, table).capacity_bytes == 48 << 30
    assert get_gpu("a100-80gb", table).context_bytes == 456
    assert get_gpu("a100", table).context_bytes == 456
    assert get_gpu("rtx4090", table).context_bytes == 789
    assert "rtx_6000" not in table and "a100_80gb" not in table  # no unreachable entries


def test_gpu_for_device_never_reports_more_than_the_device_has() -> None:
    # a GH200 (96 GB) is not an H200: it took the H200's 139.8 GiB
    with pytest.raises(UnknownNameError, match="--gpu"):
        gpu_for_device("NVIDIA GH200 480GB", 95 * 2**30)
    smaller = gpu_for_device("NVIDIA A100-SXM4-80GB", 60 * 2**30)
    assert (smaller.name, smaller.capacity_bytes) == ("a100-80gb", 60 * 2**30)
    assert smaller.context_bytes == GPUS["a100-80gb"].context_bytes
    assert gpu_for_device("NVIDIA H200", 140 * 2**30) == GPUS["h200"]  # more: the table's


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


def test_a_new_gpu_table_entry_gets_its_capability_s_workspace_and_a_typical_context(
    tmp_path: Path,
) -> None:
    # a new GPU got context_bytes 0 and the pre-Hopper cuBLAS workspace, whatever its
    # compute capability: a Hopper card was planned 1 GiB fuller than it can be
    from danlu.estimate.memory.gpus import (
        HOPPER_CONTEXT_BYTES,
        UNKNOWN_CONTEXT_BYTES,
        typical_context_bytes,
    )

    f = tmp_path / "gpus.json"
    f.write_text(
        json.dumps(
            {
                "gh200": {"capacity_bytes": 95 << 30, "compute_capability": "9.0"},
                "b200": {"capacity_bytes": 178 << 30, "compute_capability": "10.0"},
                "l40s": {"capacity_bytes": 45 << 30, "compute_capability": "8.9"},
                "a30": {"capacity_bytes": 24 << 30, "compute_capability": "8.0"},
                "rtx-a5000": {"capacity_bytes": 24 << 30, "compute_capability": "8.7"},
                "mystery": {"capacity_bytes": 32 << 30},
                "given": {
                    "capacity_bytes": 32 << 30,
                    "compute_capability": "9.0",
                    "context_bytes": 123,
                    "cublas_workspace_bytes": 456,
                },
                "l4": {"compute_capability": "9.0"},  # an existing entry's capability alone
            }
        )
    )
    table = load_gpu_table(f)
    mib = 1 << 20
    hopper_ws, older_ws = 32 * mib, 4096 * 1024 * 2 + 16 * 1024 * 8
    for name, context, workspace in (
        ("gh200", HOPPER_CONTEXT_BYTES, hopper_ws),
        ("b200", HOPPER_CONTEXT_BYTES, hopper_ws),
        ("l40s", 300 * mib, older_ws),
        ("a30", 430 * mib, older_ws),
        ("rtx-a5000", 430 * mib, older_ws),  # 8.7: the largest of its major version (8.0)
        ("mystery", UNKNOWN_CONTEXT_BYTES, hopper_ws),  # no capability: the larger figures
        ("given", 123, 456),
    ):
        g = get_gpu(name, table)
        assert (g.context_bytes, g.cublas_workspace_bytes) == (context, workspace), name
    assert get_gpu("l4", table).cublas_workspace_bytes == hopper_ws
    assert get_gpu("l4", table).context_bytes == GPUS["l4"].context_bytes
    assert typical_context_bytes("9.0") >= GPUS["h100"].context_bytes
    assert max(g.context_bytes for g in GPUS.values()) <= UNKNOWN_CONTEXT_BYTES


def test_an_h100_nvl_is_not_planned_as_an_80gb_h100() -> None:
    from danlu.core.cluster import gpu_type, gpu_type_from_device

    mib = 1 << 20
    nvl = gpu_for_device("NVIDIA H100 NVL", 95830 * mib)
    assert nvl.name == "h100-nvl" and 90 << 30 < nvl.capacity_bytes <= 95830 * mib
    assert nvl.compute_capability == "9.0" and nvl.cublas_workspace_bytes == 32 * mib
    kind = gpu_type_from_device("NVIDIA H100 NVL", 95830 * mib)
    assert (kind.name, kind.memory) == ("H100-NVL", 95830 * mib)
    assert gpu_type("h100nvl") is gpu_type("H100-NVL") and gpu_type("h100-nvl").memory == 94 << 30
    for name in ("NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3"):
        assert gpu_for_device(name, 81559 * mib) == GPUS["h100"]
    assert get_gpu("H100_NVL").name == "h100-nvl"


def test_gpu_for_memory_never_plans_a_bigger_gpu() -> None:
    from danlu.estimate.memory.gpus import UNKNOWN_CONTEXT_BYTES, gpu_for_memory

    assert gpu_for_memory("H100", 80 << 30) == GPUS["h100"]  # as sold: more than reported
    small = gpu_for_memory("A100-80GB", 60 << 30)
    assert (small.name, small.capacity_bytes) == ("a100-80gb", 60 << 30)
    unknown = gpu_for_memory("NVIDIA L40S", 45 << 30)
    assert unknown.capacity_bytes == 45 << 30
    assert unknown.context_bytes == UNKNOWN_CONTEXT_BYTES
    with pytest.raises(UnknownNameError):
        gpu_for_memory("NVIDIA L40S", 0)
